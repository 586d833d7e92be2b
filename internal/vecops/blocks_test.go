package vecops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// blockLayouts cover no blocks, no rows, no width, every tail of both
// vector widths, whole vectors, runs wider than two vectors, strides equal
// to the width (contiguous), wider (gaps) and shorter (dst runs overlap,
// as in a col2im with overlapping patches), src stride 1 (an im2row's
// neighbouring patches), and one, two and three blocks, apart and
// overlapping.
func blockLayouts() []Blocks {
	var out []Blocks
	for _, width := range []int{0, 1, 3, 5, 7, 8, 9, 15, 16, 17, 24, 33} {
		for _, rows := range []int{0, 1, 4} {
			for _, outer := range []int{0, 1, 2, 3} {
				for _, st := range [][4]int{
					{width, width, 4 * width, 4 * width},
					{width + 3, 2*width + 1, 5*width + 13, 9 * width},
					{max(1, width/2), 1, 1, 7},
					{200, width + 1, 3, 1000},
				} {
					out = append(out, Blocks{Outer: outer, Rows: rows, Width: width,
						Stride: st[0], SrcStride: st[1], OuterStride: st[2], SrcOuterStride: st[3]})
				}
			}
		}
	}
	return out
}

// extent is the elements a layout spans with the given strides.
func extent(b Blocks, stride, outerStride int) int {
	if b.Outer == 0 || b.Rows == 0 || b.Width == 0 {
		return 0
	}
	return (b.Outer-1)*outerStride + (b.Rows-1)*stride + b.Width
}

// blockRef is the definition, element by element.
func blockRef[T Float](add bool, dst []T, src []T, b Blocks) {
	for o := 0; o < b.Outer; o++ {
		for r := 0; r < b.Rows; r++ {
			for t := 0; t < b.Width; t++ {
				d, s := o*b.OuterStride+r*b.Stride+t, o*b.SrcOuterStride+r*b.SrcStride+t
				if add {
					dst[d] = dst[d] + src[s]
				} else {
					dst[d] = src[s]
				}
			}
		}
	}
}

// Every variant's CopyBlocks and AddBlocks equal the definition bit for
// bit (NaN payloads included: AddBlocks keeps dst's NaN when both are
// NaN), touch nothing outside the runs, and read and write runs that end
// at the very end of their slices.
func testBlocks[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 37))
	vs := append(variantsHere(t), goVariant())
	for _, add := range []bool{false, true} {
		op := map[bool]string{false: "CopyBlocks", true: "AddBlocks"}[add]
		for _, b := range blockLayouts() {
			nd, ns := extent(b, b.Stride, b.OuterStride), extent(b, b.SrcStride, b.SrcOuterStride)
			dst0, src := fill[T](rng, nd+2), fill[T](rng, ns)
			want := append([]T(nil), dst0...)
			blockRef(add, want[1:nd+1], src, b)
			for _, v := range vs {
				got := append([]T(nil), dst0...)
				if add {
					AddBlocks(v, got[1:nd+1], src, b)
				} else {
					CopyBlocks(v, got[1:nd+1], src, b)
				}
				sameBits(t, fmt.Sprintf("%s %s %+v", v.Name, op, b), got, want)
			}
		}
	}
}

func TestBlocksMatchDefinition(t *testing.T) {
	t.Run("float32", testBlocks[float32])
	t.Run("float64", testBlocks[float64])
}

// A layout that does not fit its slices, or a negative size or stride,
// panics before anything is touched.
func TestBlocksRefuseWhatDoesNotFit(t *testing.T) {
	dst, src := make([]float32, 10), make([]float32, 10)
	for _, b := range []Blocks{
		{Outer: 1, Rows: 3, Width: 3, Stride: 4, SrcStride: 4},                                    // dst needs 11
		{Outer: 1, Rows: 2, Width: 6, Stride: 3, SrcStride: 5},                                    // src needs 11
		{Outer: 2, Rows: 1, Width: 2, Stride: 1, SrcStride: 1, OuterStride: 9, SrcOuterStride: 1}, // dst needs 11
		{Outer: 1, Rows: 2, Width: 2, Stride: -1, SrcStride: 1},                                   // negative stride
		{Outer: 1, Rows: -1, Width: 2, Stride: 1, SrcStride: 1},                                   // negative rows
	} {
		for _, v := range append(variantsHere(t), goVariant()) {
			for _, f := range []func(Variant, []float32, []float32, Blocks){CopyBlocks[float32], AddBlocks[float32]} {
				before := append([]float32(nil), dst...)
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s %+v: no panic", v.Name, b)
						}
					}()
					f(v, dst, src, b)
				}()
				sameBits(t, fmt.Sprintf("%s %+v: dst after the panic", v.Name, b), dst, before)
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

// col2imRef is the definition of Col2Im, term by term from +0.
func col2imRef[T Float](dx, dcol []T, p Plane) {
	oh, ow := p.H-p.KH+1, p.W-p.KW+1
	for y := 0; y < p.H; y++ {
		for x := 0; x < p.W; x++ {
			var acc T
			for i := 0; i < p.KH; i++ {
				for j := 0; j < p.KW; j++ {
					if oy, ox := y-i, x-j; oy >= 0 && oy < oh && ox >= 0 && ox < ow {
						acc = acc + dcol[(i*p.KW+j)*p.LD+oy*ow+ox]
					}
				}
			}
			dx[y*p.W+x] = acc
		}
	}
}

// Every variant's Col2Im equals the definition bit for bit (NaN payloads,
// −0 sums included) for planes narrower and wider than a vector, 1×1 and
// full-size kernels, and column rows packed and LD apart, and writes
// nothing past the plane.
func testCol2Im[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 43))
	for _, p := range []Plane{
		{H: 12, W: 12, KH: 5, KW: 5}, {H: 1, W: 1, KH: 1, KW: 1}, {H: 7, W: 3, KH: 7, KW: 1},
		{H: 4, W: 16, KH: 2, KW: 3}, {H: 5, W: 9, KH: 3, KW: 9}, {H: 6, W: 17, KH: 3, KW: 4}, {H: 3, W: 40, KH: 2, KW: 2},
	} {
		oh, ow := p.H-p.KH+1, p.W-p.KW+1
		for _, extra := range []int{0, 13} {
			p.LD = oh*ow + extra
			dcol := fill[T](rng, (p.KH*p.KW-1)*p.LD+oh*ow)
			for i := range dcol {
				if rng.IntN(5) == 0 {
					var zero T
					dcol[i] = -zero
				}
			}
			want := make([]T, p.H*p.W+3)
			col2imRef(want, dcol, p)
			for _, v := range append(variantsHere(t), goVariant()) {
				got := make([]T, p.H*p.W+3)
				for i := range got {
					got[i] = 7
				}
				Col2Im(v, got, dcol, p)
				want[p.H*p.W], want[p.H*p.W+1], want[p.H*p.W+2] = 7, 7, 7
				sameBits(t, fmt.Sprintf("%s Col2Im %+v", v.Name, p), got, want)
			}
		}
	}
}

func TestCol2ImMatchesDefinition(t *testing.T) {
	t.Run("float32", testCol2Im[float32])
	t.Run("float64", testCol2Im[float64])
}
