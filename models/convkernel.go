package models

import (
	"gonum.org/v1/gonum/blas"

	"github.com/ringddp/ringddp/internal/vecops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convGeom is the geometry of a valid (unpadded) stride-1 convolution of
// a batch of images:
//
//	input  x (n, c, h, w)     NCHW, row-major
//	filter w (f, c, kh, kw)   one (c, kh, kw) kernel per output channel
//	bias   b (1, f, 1, 1)
//	output y (n, f, oh, ow)   oh = h−kh+1, ow = w−kw+1
//
// Each image is lowered to its column matrix ("col", im2col): rows
// (ci, i, j) for every input channel ci and kernel offset (i, j), in that
// order (k = c·kh·kw rows, the order of w's trailing axes), columns the
// output positions (oy, ox) in row-major order (p = oh·ow columns), and
// col[(ci,i,j), (oy,ox)] = x[ci, oy+i, ox+j]. The filter gradient reads
// the image as col's transpose, the row matrix ("rows", im2row: p × k,
// one patch per output position).
//
// The images are taken a group at a time (group() of them, the last group
// possibly shorter), so that each matrix product has many columns (and W
// is packed once per group, not per image) while the group's lowered
// matrices stay in the core's L2 cache. A group of G images has the
// column matrix col_G (k × G·p: the images' column matrices side by side,
// image i in columns i·p …) and the row matrix rows_G (G·p × k: the
// images' row matrices stacked), and its output gradient is gathered
// channel-major, dY_G (f × G·p, image i in columns i·p …):
//
//	forward  Y_G = W·col_G         (f × G·p), then y[n, f] = Y_G[f, image n] + b[f]
//	filter   dW (+)= dY_G·rows_G   (f × k), the groups in order
//	input    dcol_G = Wᵀ·dY_G      (k × G·p), then dx_n = col2im(image n's columns)
//
// with W the filter as an f × k matrix.
type convGeom struct {
	n, c, h, w int
	f, kh, kw  int
	oh, ow     int
	// budget is the most elements of a group's column matrix (0:
	// groupBudget); the tests set it small to run several groups.
	budget int
}

// groupBudget is the most elements of a group's column matrix, k·G·p:
// 2¹⁷ (512 KiB of float32) keeps it, and the product's output, in a
// core's L2 cache.
const groupBudget = 1 << 17

// k is the number of rows of an image's column matrix (the sum length of
// each output element).
func (g convGeom) k() int { return g.c * g.kh * g.kw }

// p is the number of columns of an image's column matrix (output positions).
func (g convGeom) p() int { return g.oh * g.ow }

// image, outImage and col are the element counts of one input image, one
// output image and one column matrix.
func (g convGeom) image() int    { return g.c * g.h * g.w }
func (g convGeom) outImage() int { return g.f * g.p() }
func (g convGeom) col() int      { return g.k() * g.p() }

// group is how many images one product takes: as many as fit the budget,
// at least one, at most the batch. It depends on the shapes only, so a
// run's sums are the same whatever the threads.
func (g convGeom) group() int {
	budget := g.budget
	if budget <= 0 {
		budget = groupBudget
	}
	return max(1, min(g.n, budget/g.col()))
}

// groupCol is the element count of a group's column matrix with its row
// of ones (k+1 rows, see convForward); groupRows of a group's row matrix
// with rows of kp() elements; groupOut of a group's f × G·p output (or
// gathered gradient).
func (g convGeom) groupCol() int  { return g.group() * (g.k() + 1) * g.p() }
func (g convGeom) groupRows() int { return g.group() * g.p() * g.kp() }
func (g convGeom) groupOut() int  { return g.group() * g.outImage() }

// rowPad is what the row matrix's rows are padded to, in elements: a
// multiple of every variant's micro-panel width, so that the filter
// gradient's product reads every panel of rows in place (a partial last
// panel would be copied, a row at a time, for every group).
const rowPad = 32

// kp is k+1 rounded up to rowPad: the row matrix's row stride (column k
// is the bias gradient's column of ones).
func (g convGeom) kp() int { return (g.k() + rowPad) / rowPad * rowPad }

func (g convGeom) inShape() tensor.Shape     { return tensor.Shape{g.n, g.c, g.h, g.w} }
func (g convGeom) filterShape() tensor.Shape { return tensor.Shape{g.f, g.c, g.kh, g.kw} }
func (g convGeom) biasShape() tensor.Shape   { return tensor.Shape{1, g.f, 1, 1} }
func (g convGeom) outShape() tensor.Shape    { return tensor.Shape{g.n, g.f, g.oh, g.ow} }

// im2col writes one image x (c·h·w elements) as its column matrix into
// col, whose rows are ld elements apart (p for one image, G·p inside a
// group's matrix). Row (ci, i, j) is oh runs of ow contiguous input
// elements, x[ci, oy+i, j..j+ow−1]; for each (ci, i) the kw rows of j =
// 0… are one vecops.CopyBlocks (blocks one row of col, and one element of
// x, apart).
func im2col[T float](v vecops.Variant, g convGeom, x, col []T, ld int) {
	b := vecops.Blocks{Outer: g.kw, Rows: g.oh, Width: g.ow, Stride: g.ow, OuterStride: ld, SrcStride: g.w, SrcOuterStride: 1}
	for ci := 0; ci < g.c; ci++ {
		for i := 0; i < g.kh; i++ {
			vecops.CopyBlocks(v, col[(ci*g.kh+i)*g.kw*ld:], x[ci*g.h*g.w+i*g.w:], b)
		}
	}
}

// im2row writes one image x (c·h·w elements) as its row matrix into rows
// (p rows of k elements, kp apart; the kp−k elements after each are not
// written): row (oy, ox) is the patch x[·, oy.., ox..] in (ci, i, j)
// order. For each input channel ci and kernel row i, the kw elements that
// position (oy, ox) takes are x[ci, oy+i, ox..ox+kw−1]: one
// vecops.CopyBlocks of oh blocks (one per oy) of ow runs of kw, the runs
// one element apart in x (neighbouring patches overlap) and kp apart in
// rows.
func im2row[T float](v vecops.Variant, g convGeom, x, rows []T) {
	kp := g.kp()
	b := vecops.Blocks{Outer: g.oh, Rows: g.ow, Width: g.kw, Stride: kp, OuterStride: g.ow * kp, SrcStride: 1, SrcOuterStride: g.w}
	for ci := 0; ci < g.c; ci++ {
		for i := 0; i < g.kh; i++ {
			vecops.CopyBlocks(v, rows[(ci*g.kh+i)*g.kw:], x[ci*g.h*g.w+i*g.w:], b)
		}
	}
}

// col2im is im2col's adjoint: it sets one image dx (c·h·w elements) to
// Σ over the column matrix dcol's entries (rows ld elements apart) of
// dcol[(ci,i,j), (oy,ox)] added at x[ci, oy+i, ox+j], each element's
// terms in order of (i, j) from +0: one vecops.Col2Im per input channel.
func col2im[T float](v vecops.Variant, g convGeom, dcol []T, ld int, dx []T) {
	pl := vecops.Plane{H: g.h, W: g.w, KH: g.kh, KW: g.kw, LD: ld}
	for ci := 0; ci < g.c; ci++ {
		vecops.Col2Im(v, dx[ci*g.h*g.w:(ci+1)*g.h*g.w], dcol[ci*g.kh*g.kw*ld:], pl)
	}
}

// gemm computes c = a·b + beta·c (row-major, ta/tb transposing a/b) with
// gorgonia's BLAS bl, for either float type.
func gemm[T float](bl G.BLAS, ta, tb blas.Transpose, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		bl.Sgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		bl.Dgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// gatherGroup writes the output gradients of images [n0, n0+cnt) channel-
// major into dyg (f × cnt·p, rows cnt·p apart): dyg[f, i·p+q] =
// dy[n0+i, f, q].
func gatherGroup[T float](g convGeom, dy, dyg []T, n0, cnt int) {
	p, ld := g.p(), cnt*g.p()
	for i := 0; i < cnt; i++ {
		dyn := dy[(n0+i)*g.outImage():]
		for f := 0; f < g.f; f++ {
			copy(dyg[f*ld+i*p:][:p], dyn[f*p:][:p])
		}
	}
}

// convForward computes y = conv(x, w) + b for the whole batch, a group of
// images at a time. The bias rides in the product: col has a last row of
// ones (row k) and wb is W with b as its last column (f × k+1), so that
// each element's sum ends with b[f]·1, one more fused multiply-add. Per
// group: im2col of each image into its columns of col, then per image
// y_n = wb·(its columns of col), written straight into y (f × p, which is
// the image's output in NCHW order). The products read wb and col where
// they are (whole micro-panels), so the group saves the lowering's cache
// misses, not packing.
func convForward[T float](bl G.BLAS, v vecops.Variant, g convGeom, x, w, b, y, col, wb []T) {
	k, p, gr := g.k(), g.p(), g.group()
	for f := 0; f < g.f; f++ {
		copy(wb[f*(k+1):f*(k+1)+k], w[f*k:(f+1)*k])
		wb[f*(k+1)+k] = b[f]
	}
	for n0 := 0; n0 < g.n; n0 += gr {
		cnt := min(gr, g.n-n0)
		ld := cnt * p
		for i := 0; i < cnt; i++ {
			im2col(v, g, x[(n0+i)*g.image():][:g.image()], col[i*p:], ld)
		}
		ones := col[k*ld : (k+1)*ld]
		for q := range ones {
			ones[q] = 1
		}
		for i := 0; i < cnt; i++ {
			gemm(bl, blas.NoTrans, blas.NoTrans, g.f, p, k+1, wb, k+1, col[i*p:], ld, 0, y[(n0+i)*g.outImage():], p)
		}
	}
}

// convFilterGrad sets dw = Σ over groups of dY_G·rows_G: per group, the
// gathered output gradient dY_G (into dyg), im2row of each image into its
// rows of rows and 1 into their column k, then one product of f × G·p by
// G·p × kp accumulated into dwp (f × kp) by the product itself (beta 1
// after the first group), groups in order. dw is dwp's first k columns,
// and column k is the bias gradient, Σ of dY over images and positions
// (convBiasGradOp copies it). The other padding columns of rows are zero:
// the op's own scratch, which nothing else writes, and never in those
// columns, so they keep the zeros of its allocation.
func convFilterGrad[T float](bl G.BLAS, v vecops.Variant, g convGeom, x, dy, dw, rows, dyg, dwp []T) {
	k, kp, p, gr := g.k(), g.kp(), g.p(), g.group()
	for n0 := 0; n0 < g.n; n0 += gr {
		cnt := min(gr, g.n-n0)
		var beta T
		if n0 > 0 {
			beta = 1
		}
		gatherGroup(g, dy, dyg, n0, cnt)
		for i := 0; i < cnt; i++ {
			im2row(v, g, x[(n0+i)*g.image():][:g.image()], rows[i*p*kp:])
		}
		for r := 0; r < cnt*p; r++ {
			rows[r*kp+k] = 1
		}
		gemm(bl, blas.NoTrans, blas.NoTrans, g.f, kp, cnt*p, dyg, cnt*p, rows, kp, beta, dwp, kp)
	}
	vecops.CopyBlocks(v, dw, dwp, vecops.Blocks{Outer: 1, Rows: g.f, Width: k, Stride: k, SrcStride: kp})
}

// convInputGrad sets dx a group at a time: the gathered output gradient
// dY_G (into dyg), dcol_G = Wᵀ·dY_G (k × f by f × G·p, into dcol), then
// each image's dx_n = col2im of its columns.
func convInputGrad[T float](bl G.BLAS, v vecops.Variant, g convGeom, w, dy, dx, dcol, dyg []T) {
	k, p, gr := g.k(), g.p(), g.group()
	for n0 := 0; n0 < g.n; n0 += gr {
		cnt := min(gr, g.n-n0)
		ld := cnt * p
		gatherGroup(g, dy, dyg, n0, cnt)
		gemm(bl, blas.Trans, blas.NoTrans, k, ld, g.f, w, k, dyg, ld, 0, dcol, ld)
		for i := 0; i < cnt; i++ {
			col2im(v, g, dcol[i*p:], ld, dx[(n0+i)*g.image():][:g.image()])
		}
	}
}
