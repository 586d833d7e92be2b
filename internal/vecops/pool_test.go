package vecops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// poolRef is the definition: a row-major scan of each window that keeps
// a later element only when it beats the kept one.
func poolRef[T Float](x []T, planes, h, w int) ([]T, []int32) {
	var y []T
	var am []int32
	for pl := 0; pl < planes; pl++ {
		for i := 0; i < h/2; i++ {
			for j := 0; j < w/2; j++ {
				at := pl*h*w + 2*i*w + 2*j
				for _, c := range []int{pl*h*w + 2*i*w + 2*j + 1, pl*h*w + (2*i+1)*w + 2*j, pl*h*w + (2*i+1)*w + 2*j + 1} {
					if v, u := x[c], x[at]; v > u || (u != u && v == v) {
						at = c
					}
				}
				y, am = append(y, x[at]), append(am, int32(at))
			}
		}
	}
	return y, am
}

// Every variant's MaxPool2 equals the scan bit for bit, indices included:
// ties (values drawn from a few), NaN, ±Inf and ±0, odd sizes, rows of
// fewer and more outputs than a vector (every tail of both widths), and
// one and several planes; nothing past y and argmax is written.
func testPool[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 53))
	few := []T{0, 1, -1, 2, T(math.Inf(1)), T(math.Inf(-1)), T(math.NaN())}
	var zero T
	few = append(few, -zero)
	for _, sh := range [][3]int{{1, 2, 2}, {3, 5, 7}, {2, 24, 24}, {4, 8, 8}, {1, 3, 33}, {2, 4, 34}, {1, 2, 64}, {1, 6, 65}, {5, 2, 17}, {1, 2, 31}, {1, 2, 16}, {1, 2, 18}} {
		planes, h, w := sh[0], sh[1], sh[2]
		x := make([]T, planes*h*w)
		for i := range x {
			x[i] = few[rng.IntN(len(few))]
		}
		want, wantAm := poolRef(x, planes, h, w)
		n := len(want)
		for _, v := range append(variantsHere(t), goVariant()) {
			y, am := make([]T, n+2), make([]int32, n+2)
			y[n], am[n] = 9, 9
			MaxPool2(v, x, y, am, planes, h, w)
			what := fmt.Sprintf("%s MaxPool2 %v", v.Name, sh)
			sameBits(t, what, y[:n+1], append(append([]T(nil), want...), 9))
			for i := range wantAm {
				if am[i] != wantAm[i] {
					t.Fatalf("%s: argmax[%d] = %d, want %d", what, i, am[i], wantAm[i])
				}
			}
			if am[n] != 9 {
				t.Fatalf("%s: wrote past argmax", what)
			}
			checkPoolGrad[T](t, v, what, wantAm, planes, h, w)
		}
	}
}

func TestMaxPool2MatchesScan(t *testing.T) {
	t.Run("float32", testPool[float32])
	t.Run("float64", testPool[float64])
}

// checkPoolGrad requires MaxPool2Grad to give dx = 0 but dy at each
// argmax (dy with NaN payloads and −0; dx starting as garbage, its
// elements in no window included), writing nothing past dx.
func checkPoolGrad[T Float](t *testing.T, v Variant, what string, am []int32, planes, h, w int) {
	rng := rand.New(rand.NewPCG(59, 61))
	dy := fill[T](rng, len(am))
	want := make([]T, planes*h*w+1)
	for o, at := range am {
		want[at] = dy[o]
	}
	want[planes*h*w] = 5
	dx := fill[T](rng, planes*h*w+1)
	dx[planes*h*w] = 5
	MaxPool2Grad(v, dy, dx[:planes*h*w], am, planes, h, w)
	sameBits(t, what+" MaxPool2Grad", dx, want)
}
