package vecops

import "fmt"

// col2imKernel sets one plane of dx to the col2im of dcol (see Col2Im),
// for planes whose rows fit one vector.
type col2imKernel[T Float] func(dx, dcol *T, ld, h, w, oh, ow, kh, kw int, rowMask, runMask uint16)

// Plane is the geometry of one input plane of a valid (unpadded)
// stride-1 convolution: H×W inputs, KH×KW kernel offsets, OH×OW = (H−KH+1)
// × (W−KW+1) outputs, and the column matrix's rows LD elements apart
// (row (i, j) holds the OH·OW products of kernel offset (i, j)).
type Plane struct{ H, W, KH, KW, LD int }

// Col2Im sets one plane dx (H·W elements) to im2col's adjoint of the
// column matrix rows of dcol that belong to it (KH·KW rows, LD apart):
//
//	dx[y, x] = Σ over (i, j) with 0 ≤ y−i < OH, 0 ≤ x−j < OW, in order of i then j,
//	           of dcol[(i·KW + j)·LD + (y−i)·OW + (x−j)]
//
// summed from +0, one IEEE addition per term with the running sum as the
// first operand (its NaN survives when both are NaN). The avx512 variant
// keeps a row of dx in a register while its terms are added (rows no
// wider than a vector), the others add whole runs into dx (AddBlocks);
// every variant gives the same bits. It panics when dx or dcol is too
// short or the geometry is not a valid convolution's.
func Col2Im[T Float](v Variant, dx, dcol []T, p Plane) {
	if p.KH < 1 || p.KW < 1 || p.H < p.KH || p.W < p.KW || p.LD < 0 {
		panic(fmt.Sprintf("vecops: Col2Im: plane %+v is not a valid convolution's", p))
	}
	oh, ow := p.H-p.KH+1, p.W-p.KW+1
	if len(dx) < p.H*p.W || p.LD < oh*ow && p.KH*p.KW > 1 || len(dcol) < (p.KH*p.KW-1)*p.LD+oh*ow {
		panic(fmt.Sprintf("vecops: Col2Im: plane %+v: dx has %d elements, dcol %d", p, len(dx), len(dcol)))
	}
	k := kernelsOf[T](&v)
	if k.col2im != nil && p.W <= k.lanes {
		k.col2im(&dx[0], &dcol[0], p.LD, p.H, p.W, oh, ow, p.KH, p.KW, uint16(1)<<p.W-1, uint16(1)<<ow-1)
		return
	}
	clear(dx[:p.H*p.W])
	b := Blocks{Outer: p.KW, Rows: oh, Width: ow, Stride: p.W, OuterStride: 1, SrcStride: ow, SrcOuterStride: p.LD}
	for i := 0; i < p.KH; i++ {
		AddBlocks(v, dx[i*p.W:p.H*p.W], dcol[i*p.KW*p.LD:], b)
	}
}
