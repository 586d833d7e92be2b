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
	oh, ow := h/2, w/2
	if planes < 0 || h < 2 || w < 2 || planes*h*w > math.MaxInt32 || len(x) < planes*h*w || len(y) < planes*oh*ow || len(argmax) < planes*oh*ow {
		panic(fmt.Sprintf("vecops: MaxPool2: %d planes of %d×%d, x %d, y %d, argmax %d elements", planes, h, w, len(x), len(y), len(argmax)))
	}
	if planes == 0 {
		return
	}
	if k := kernelsOf[T](&v); k.maxPool != nil {
		rem := ow % k.lanes
		in0, in1 := min(2*rem, k.lanes), max(0, 2*rem-k.lanes)
		k.maxPool(&x[0], &y[0], &argmax[0], planes, h, w, ow/k.lanes, uint16(1)<<in0-1, uint16(1)<<in1-1, uint16(1)<<rem-1)
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
	oh, ow := h/2, w/2
	if planes < 0 || h < 2 || w < 2 || planes*h*w > math.MaxInt32 || len(dx) < planes*h*w || len(dy) < planes*oh*ow || len(argmax) < planes*oh*ow {
		panic(fmt.Sprintf("vecops: MaxPool2Grad: %d planes of %d×%d, dy %d, dx %d, argmax %d elements", planes, h, w, len(dy), len(dx), len(argmax)))
	}
	if planes == 0 {
		return
	}
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
	rem := ow % k.lanes
	in0, in1 := min(2*rem, k.lanes), max(0, 2*rem-k.lanes)
	k.maxPoolGrad(&dy[0], &dx[0], &argmax[0], planes, h, w, ow/k.lanes, uint16(1)<<in0-1, uint16(1)<<in1-1, uint16(1)<<rem-1)
}
