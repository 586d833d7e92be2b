package models

import (
	"gonum.org/v1/gonum/blas"
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
// col[(ci,i,j), (oy,ox)] = x[ci, oy+i, ox+j]. Then, per image, y = W·col + b
// with W the filter as an f × k matrix: the product is f × p, which is the
// image's output already in NCHW order. The filter gradient reads the
// image as col's transpose, the row matrix ("rows", im2row: p × k, one
// patch per output position), so that its product dY·rows reads both
// operands in the layout they are stored in.
type convGeom struct {
	n, c, h, w int
	f, kh, kw  int
	oh, ow     int
}

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

func (g convGeom) inShape() tensor.Shape     { return tensor.Shape{g.n, g.c, g.h, g.w} }
func (g convGeom) filterShape() tensor.Shape { return tensor.Shape{g.f, g.c, g.kh, g.kw} }
func (g convGeom) biasShape() tensor.Shape   { return tensor.Shape{1, g.f, 1, 1} }
func (g convGeom) outShape() tensor.Shape    { return tensor.Shape{g.n, g.f, g.oh, g.ow} }

// im2col writes one image x (c·h·w elements) as its column matrix into col
// (k·p elements): each row is oh runs of ow contiguous input elements.
func im2col[T float](g convGeom, x, col []T) {
	p, row := g.p(), 0
	for ci := 0; ci < g.c; ci++ {
		plane := x[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for i := 0; i < g.kh; i++ {
			for j := 0; j < g.kw; j++ {
				dst := col[row*p : (row+1)*p]
				for oy := 0; oy < g.oh; oy++ {
					copy(dst[oy*g.ow:(oy+1)*g.ow], plane[(oy+i)*g.w+j:])
				}
				row++
			}
		}
	}
}

// im2row writes one image x (c·h·w elements) as its row matrix into rows
// (p·k elements): row (oy, ox) is the patch x[·, oy.., ox..] in (ci, i, j)
// order. Neighbouring patches overlap: the row of (oy, ox) is the row of
// (oy, ox−1) moved one place left (its element (ci, i, j+1) becomes
// (ci, i, j)), but for the last element of each run, j = kw−1, which is
// read anew. So the first row of each output row oy is gathered, c·kh
// runs of kw elements, and every other row is one copy of k−1 elements
// and c·kh reads.
func im2row[T float](g convGeom, x, rows []T) {
	k := g.k()
	for oy := 0; oy < g.oh; oy++ {
		cur := rows[oy*g.ow*k : (oy*g.ow+1)*k]
		for ci := 0; ci < g.c; ci++ {
			for i := 0; i < g.kh; i++ {
				copy(cur[(ci*g.kh+i)*g.kw:][:g.kw], x[ci*g.h*g.w+(oy+i)*g.w:][:g.kw])
			}
		}
		for ox := 1; ox < g.ow; ox++ {
			prev := cur
			cur = rows[(oy*g.ow+ox)*k : (oy*g.ow+ox+1)*k]
			copy(cur[:k-1], prev[1:])
			last := ox + g.kw - 1
			for ci := 0; ci < g.c; ci++ {
				for i := 0; i < g.kh; i++ {
					cur[(ci*g.kh+i+1)*g.kw-1] = x[ci*g.h*g.w+(oy+i)*g.w+last]
				}
			}
		}
	}
}

// col2im is im2col's adjoint: it sets one image dx (c·h·w elements) to
// Σ over the column matrix dcol's entries of dcol[(ci,i,j), (oy,ox)] added
// at x[ci, oy+i, ox+j], the rows taken in order.
func col2im[T float](g convGeom, dcol, dx []T) {
	clear(dx[:g.image()])
	p, row := g.p(), 0
	for ci := 0; ci < g.c; ci++ {
		plane := dx[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for i := 0; i < g.kh; i++ {
			for j := 0; j < g.kw; j++ {
				src := dcol[row*p : (row+1)*p]
				for oy := 0; oy < g.oh; oy++ {
					d := plane[(oy+i)*g.w+j:][:g.ow]
					s := src[oy*g.ow : (oy+1)*g.ow]
					for q, v := range s {
						d[q] += v
					}
				}
				row++
			}
		}
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

// convForward computes y = conv(x, w) + b for the whole batch. Per image
// n: im2col into col, each output row f set to b[f], then y_n += W·col,
// one product of f × k by k × p.
func convForward[T float](bl G.BLAS, g convGeom, x, w, b, y, col []T) {
	k, p := g.k(), g.p()
	for n := 0; n < g.n; n++ {
		im2col(g, x[n*g.image():(n+1)*g.image()], col)
		yn := y[n*g.outImage() : (n+1)*g.outImage()]
		for f := 0; f < g.f; f++ {
			row := yn[f*p : (f+1)*p]
			for q := range row {
				row[q] = b[f]
			}
		}
		gemm(bl, blas.NoTrans, blas.NoTrans, g.f, p, k, w, k, col, p, 1, yn, p)
	}
}

// convFilterGrad sets dw = Σ_n dY_n · rows_n: per image, im2row into rows,
// then one product of f × p by p × k accumulated into dw by the product
// itself (beta 1 after the first image), images in order.
func convFilterGrad[T float](bl G.BLAS, g convGeom, x, dy, dw, rows []T) {
	k, p := g.k(), g.p()
	for n := 0; n < g.n; n++ {
		var beta T
		if n > 0 {
			beta = 1
		}
		im2row(g, x[n*g.image():(n+1)*g.image()], rows)
		dyn := dy[n*g.outImage() : (n+1)*g.outImage()]
		gemm(bl, blas.NoTrans, blas.NoTrans, g.f, k, p, dyn, p, rows, k, beta, dw, k)
	}
}

// convBiasGrad sets db[f] = Σ over images and output positions of
// dY[n, f, ·], in float64: reading dY in order, four partial sums per f
// (positions q mod 4, kept in sums, 4·f elements), then added.
func convBiasGrad[T float](g convGeom, dy, db []T, sums []float64) {
	p := g.p()
	clear(sums[:4*g.f])
	for n := 0; n < g.n; n++ {
		for f := 0; f < g.f; f++ {
			s := sums[4*f : 4*f+4]
			row := dy[n*g.outImage()+f*p : n*g.outImage()+(f+1)*p]
			q := 0
			for ; q+4 <= len(row); q += 4 {
				s[0] += float64(row[q])
				s[1] += float64(row[q+1])
				s[2] += float64(row[q+2])
				s[3] += float64(row[q+3])
			}
			for ; q < len(row); q++ {
				s[q%4] += float64(row[q])
			}
		}
	}
	for f := range db[:g.f] {
		s := sums[4*f : 4*f+4]
		db[f] = T((s[0] + s[1]) + (s[2] + s[3]))
	}
}

// convInputGrad sets dx, per image n: dcol = Wᵀ·dY_n (k × f by f × p, into
// the one column matrix dcol), then dx_n = col2im(dcol).
func convInputGrad[T float](bl G.BLAS, g convGeom, w, dy, dx, dcol []T) {
	k, p := g.k(), g.p()
	for n := 0; n < g.n; n++ {
		dyn := dy[n*g.outImage() : (n+1)*g.outImage()]
		gemm(bl, blas.Trans, blas.NoTrans, k, p, g.f, w, k, dyn, p, 0, dcol, p)
		col2im(g, dcol, dx[n*g.image():(n+1)*g.image()])
	}
}
