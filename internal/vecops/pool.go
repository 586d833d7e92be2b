package vecops

import (
	"fmt"
	"math"
)

// poolKernel is MaxPool2 for rows of full chunks of lanes outputs and a
// masked one (inMask0 and inMask1 select the chunk's input elements,
// outMask its outputs).
type poolKernel[T Float] func(x, y *T, argmax *int32, planes, h, w, full int, inMask0, inMask1, outMask uint16)

// MaxPool2 is a 2×2 max-pool with stride 2 over planes planes of h×w
// elements of x: y gets ⌊h/2⌋×⌊w/2⌋ per plane (an odd last row or column
// belongs to no window), each the winner of its window x[2i..2i+1,
// 2j..2j+1], and argmax the winner's index into x. The winner is the
// first maximum in row-major order, where v beats u when v > u or u is NaN
// and v is not (so ties go to the earlier element, +0 and −0 tie, NaN
// never beats a number and a window of NaN gives its first): computed as
// a tournament, the top pair's winner, the bottom pair's, then the bottom
// one where it beats the top one, which gives the scan's answer. Every
// variant gives the same values and indices. It panics when a slice is
// too short, h or w is below 2, or x has more than 2³¹−1 elements.
func MaxPool2[T Float](v Variant, x, y []T, argmax []int32, planes, h, w int) {
	if !checkPool("MaxPool2", len(x), len(y), len(argmax), planes, h, w) {
		return
	}
	oh, ow := h/2, w/2
	if k := kernelsOf[T](&v); k.maxPool != nil {
		full, in0, in1, out := poolMasks(k.lanes, ow)
		k.maxPool(&x[0], &y[0], &argmax[0], planes, h, w, full, in0, in1, out)
		return
	}
	o := 0
	for pl := 0; pl < planes; pl++ {
		for i := 0; i < oh; i++ {
			r0 := pl*h*w + 2*i*w
			r1 := r0 + w
			top, bottom := x[r0:r0+2*ow], x[r1:r1+2*ow]
			yr, ar := y[o:o+ow], argmax[o:o+ow]
			for j := range yr {
				t := 2*j + beats(top[2*j+1], top[2*j])
				b := 2*j + beats(bottom[2*j+1], bottom[2*j])
				at := r0 + t
				at += beats(bottom[b], top[t]) * (r1 + b - at)
				yr[j], ar[j] = x[at], int32(at)
			}
			o += ow
		}
	}
}

// bit is 1 for true and 0 for false (a SETcc, no branch).
func bit(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}

// beats is 1 when v beats u (v > u, or u is NaN and v is not) and 0
// otherwise, without a branch: the winners of windows are data, and a
// branch on them would be mispredicted about half the time.
func beats[T Float](v, u T) int {
	return bit(v > u) | (bit(u != u) & bit(v == v))
}

// MaxPool2Grad is MaxPool2's gradient: dx (planes planes of h×w elements)
// is 0 but at each window's winner argmax[o], which gets dy[o]; argmax is
// what MaxPool2 recorded for the same planes, h and w. The avx512 variant
// writes every window's four elements at once (dy where the winner is, +0
// elsewhere), the others clear dx and scatter; every variant gives the
// same bits. It panics as MaxPool2 does.
func MaxPool2Grad[T Float](v Variant, dy, dx []T, argmax []int32, planes, h, w int) {
	if !checkPool("MaxPool2Grad", len(dx), len(dy), len(argmax), planes, h, w) {
		return
	}
	oh, ow := h/2, w/2
	k := kernelsOf[T](&v)
	if k.maxPoolGrad == nil {
		clear(dx[:planes*h*w])
		for o, at := range argmax[:planes*oh*ow] {
			dx[at] = dy[o]
		}
		return
	}
	if h%2 != 0 || w%2 != 0 {
		clear(dx[:planes*h*w]) // the elements in no window
	}
	full, in0, in1, out := poolMasks(k.lanes, ow)
	k.maxPoolGrad(&dy[0], &dx[0], &argmax[0], planes, h, w, full, in0, in1, out)
}

// checkPool panics when planes planes of h×w elements (nx of them in the
// input or its gradient) and their ⌊h/2⌋×⌊w/2⌋ windows (ny outputs or
// output gradients, na indices) do not fit, and reports whether there is
// any plane.
func checkPool(op string, nx, ny, na, planes, h, w int) bool {
	if planes < 0 || h < 2 || w < 2 || planes*h*w > math.MaxInt32 || nx < planes*h*w || ny < planes*(h/2)*(w/2) || na < planes*(h/2)*(w/2) {
		panic(fmt.Sprintf("vecops: %s: %d planes of %d×%d do not fit %d, %d and %d elements", op, planes, h, w, nx, ny, na))
	}
	return planes > 0
}

// poolMasks are the pooling kernels' chunk arguments for rows of ow
// windows: full chunks of lanes windows, then the masks of the last
// chunk's two input vectors (2·rem elements) and of its rem outputs.
func poolMasks(lanes, ow int) (full int, in0, in1, out uint16) {
	rem := ow % lanes
	a, b := min(2*rem, lanes), max(0, 2*rem-lanes)
	return ow / lanes, uint16(1)<<a - 1, uint16(1)<<b - 1, uint16(1)<<rem - 1
}
