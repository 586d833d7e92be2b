package vecops

import "fmt"

// blockKernel copies or adds outer blocks of rows runs of full whole
// vectors and one masked vector (the bits of mask) from src to dst: runs
// ss and ds elements apart, blocks sso and dso apart, but passed less
// rows·ss and rows·ds (see the generator).
type blockKernel[T Float] func(dst *T, ds, dso int, src *T, ss, sso int, outer, rows, full int, mask uint16)

// Blocks is the layout of outer blocks of Rows runs of Width elements in
// a slice, run r of block o starting at o·OuterStride + r·Stride (a
// convolution's lowering: a run is a row of an image plane or a patch, a
// block the runs of one kernel offset or one output row).
type Blocks struct {
	Outer, Rows, Width  int
	Stride, OuterStride int // in dst
	SrcStride           int
	SrcOuterStride      int
}

// CopyBlocks copies the runs of b from src to dst:
//
//	dst[o·OuterStride + r·Stride + t] = src[o·SrcOuterStride + r·SrcStride + t]
//
// for o < Outer, r < Rows, t < Width, in order of o, then r, so runs that
// overlap in dst leave the last one's values. The avx512 variant moves
// each run with whole vectors and one masked vector, the others with the
// scalar loop; every variant gives the same bits. It panics when a run
// would fall outside dst or src or a size or stride is negative.
func CopyBlocks[T Float](v Variant, dst, src []T, b Blocks) {
	blocks(v, "CopyBlocks", dst, src, b, kernelsOf[T](&v).copyBlock, func(d, s []T) { copy(d, s) })
}

// AddBlocks adds the runs of b from src into dst:
//
//	dst[d + t] = dst[d + t] + src[s + t]
//
// with d and s as in CopyBlocks: one IEEE addition per element with dst's
// value as the first operand (the scalar code's, whose NaN survives when
// both are NaN), the runs in order, so that runs overlapping in dst (a
// col2im) add up in the same order in every variant: every variant gives
// the same bits. It panics as CopyBlocks does.
func AddBlocks[T Float](v Variant, dst, src []T, b Blocks) {
	blocks(v, "AddBlocks", dst, src, b, kernelsOf[T](&v).addBlock, func(d, s []T) {
		for t := range s {
			d[t] = d[t] + s[t]
		}
	})
}

// blocks runs kernel on the runs of b, or scalar on each run when the
// variant has no kernel.
func blocks[T Float](v Variant, op string, dst, src []T, b Blocks, kernel blockKernel[T], scalar func(d, s []T)) {
	if !b.fits(op, len(dst), len(src)) {
		return
	}
	if kernel != nil {
		lanes := kernelsOf[T](&v).lanes
		kernel(&dst[0], b.Stride, b.OuterStride-b.Rows*b.Stride, &src[0], b.SrcStride, b.SrcOuterStride-b.Rows*b.SrcStride,
			b.Outer, b.Rows, b.Width/lanes, uint16(1)<<(b.Width%lanes)-1)
		return
	}
	for o := 0; o < b.Outer; o++ {
		for r := 0; r < b.Rows; r++ {
			d, s := o*b.OuterStride+r*b.Stride, o*b.SrcOuterStride+r*b.SrcStride
			scalar(dst[d:d+b.Width], src[s:s+b.Width])
		}
	}
}

// fits panics when b's runs do not fit slices of nd and ns elements or a
// size or stride is negative, and reports whether b has any element.
func (b Blocks) fits(op string, nd, ns int) bool {
	if b.Outer < 0 || b.Rows < 0 || b.Width < 0 || b.Stride < 0 || b.OuterStride < 0 || b.SrcStride < 0 || b.SrcOuterStride < 0 {
		panic(fmt.Sprintf("vecops: %s: negative size or stride in %+v", op, b))
	}
	if b.Outer == 0 || b.Rows == 0 || b.Width == 0 {
		return false
	}
	if (b.Outer-1)*b.OuterStride+(b.Rows-1)*b.Stride+b.Width > nd || (b.Outer-1)*b.SrcOuterStride+(b.Rows-1)*b.SrcStride+b.Width > ns {
		panic(fmt.Sprintf("vecops: %s: %+v does not fit %d and %d elements", op, b, nd, ns))
	}
	return true
}
