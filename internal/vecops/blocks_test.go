package vecops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// blockShape is one CopyBlock/AddBlock call: rows runs of width, the runs
// ds apart in dst and ss apart in src.
type blockShape struct{ rows, width, ds, ss int }

// blockShapes cover no rows, no width, every tail of both vector widths,
// whole vectors, runs wider than two vectors, strides equal to the width
// (contiguous), wider (gaps) and shorter (dst runs overlap, as in a
// col2im with overlapping patches), and src stride 1 (an im2row's
// neighbouring patches).
func blockShapes() []blockShape {
	var out []blockShape
	for _, width := range []int{0, 1, 3, 5, 7, 8, 9, 15, 16, 17, 24, 33} {
		for _, rows := range []int{0, 1, 4} {
			out = append(out,
				blockShape{rows, width, width, width},
				blockShape{rows, width, width + 3, 2*width + 1},
				blockShape{rows, width, max(1, width/2), 1},
				blockShape{rows, width, 200, width + 1})
		}
	}
	return out
}

// blockRef is the definition, element by element.
func blockRef[T Float](add bool, dst []T, src []T, s blockShape) {
	for r := 0; r < s.rows; r++ {
		for t := 0; t < s.width; t++ {
			if add {
				dst[r*s.ds+t] = dst[r*s.ds+t] + src[r*s.ss+t]
			} else {
				dst[r*s.ds+t] = src[r*s.ss+t]
			}
		}
	}
}

// Every variant's CopyBlock and AddBlock equal the definition bit for bit
// (NaN payloads included: AddBlock keeps dst's NaN when both are NaN),
// touch nothing outside the runs, and read and write runs that end at the
// very end of their slices.
func testBlocks[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	vs := append(variantsHere(t), goVariant())
	for _, add := range []bool{false, true} {
		op := map[bool]string{false: "CopyBlock", true: "AddBlock"}[add]
		for _, s := range blockShapes() {
			nd, ns := 0, 0
			if s.rows > 0 && s.width > 0 {
				nd, ns = (s.rows-1)*s.ds+s.width, (s.rows-1)*s.ss+s.width
			}
			dst0, src := fill[T](rng, nd+2), fill[T](rng, ns)
			want := append([]T(nil), dst0...)
			blockRef(add, want[1:nd+1], src, s)
			for _, v := range vs {
				got := append([]T(nil), dst0...)
				if add {
					AddBlock(v, got[1:nd+1], s.ds, src, s.ss, s.rows, s.width)
				} else {
					CopyBlock(v, got[1:nd+1], s.ds, src, s.ss, s.rows, s.width)
				}
				sameBits(t, fmt.Sprintf("%s %s %+v", v.Name, op, s), got, want)
			}
		}
	}
}

func TestBlocksMatchDefinition(t *testing.T) {
	t.Run("float32", testBlocks[float32])
	t.Run("float64", testBlocks[float64])
}

// A block that does not fit its slices, or a negative size, panics before
// anything is touched.
func TestBlocksRefuseWhatDoesNotFit(t *testing.T) {
	dst, src := make([]float32, 10), make([]float32, 10)
	for _, c := range []struct {
		nd, ds, ss, rows, width int
	}{
		{10, 4, 4, 3, 3},  // dst needs 11
		{10, 3, 5, 2, 6},  // src needs 11
		{10, -1, 1, 2, 2}, // negative stride
		{10, 1, 1, -1, 2}, // negative rows
	} {
		for _, v := range append(variantsHere(t), goVariant()) {
			for _, f := range []func(Variant, []float32, int, []float32, int, int, int){CopyBlock[float32], AddBlock[float32]} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s %+v: no panic", v.Name, c)
						}
					}()
					f(v, dst[:c.nd], c.ds, src, c.ss, c.rows, c.width)
				}()
			}
		}
	}
}

// ReLU and ReLUGrad: every variant gives the scalar code's bits, and the
// scalar code is the product by 1 or 0 of its definition.
func testReLU[T Float](t *testing.T) {
	checkAgainstGo(t, "ReLU", 2, func(v Variant, xs [][]T) { ReLU(v, xs[0], xs[1]) })
	checkAgainstGo(t, "ReLUGrad", 3, func(v Variant, xs [][]T) { ReLUGrad(v, xs[0], xs[1], xs[2]) })
	xs := append(specials[T](), fill[T](rand.New(rand.NewPCG(1, 1)), 100)...)
	dy := fill[T](rand.New(rand.NewPCG(2, 2)), len(xs))
	out, grad := make([]T, len(xs)), make([]T, len(xs))
	ReLU(goVariant(), out, xs)
	ReLUGrad(goVariant(), grad, xs, dy)
	for i, x := range xs {
		var m T
		if x >= 0 {
			m = 1
		}
		if bits(out[i]) != bits(x*m) || bits(grad[i]) != bits(dy[i]*m) {
			t.Fatalf("x=%v: ReLU %v, ReLUGrad %v (dy %v)", x, out[i], grad[i], dy[i])
		}
	}
}

func TestReLUMatchesScalar(t *testing.T) {
	t.Run("float32", testReLU[float32])
	t.Run("float64", testReLU[float64])
}
