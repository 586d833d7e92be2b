package ddp

import (
	"math"

	"gonum.org/v1/gonum/blas"

	"github.com/ringddp/ringddp/internal/gemm"
)

// The small dense products of PowerSGD on row-major matrices: M is n×m,
// P is n×r, Q is m×r, r small. Each writes its whole output, by one
// BLAS gemm call on package gemm (the packed kernels the trainer's
// products use; gonum's BLAS for products too small to pack), so the
// sums' order is the kernel's, not a fixed loop's: results agree with a
// plain loop's within rounding.

// mulNN sets p = m·q.
func mulNN[T Float](mm gemm.Implementation, p, m, q []T, n, cols, r int) {
	gemmT(mm, blas.NoTrans, blas.NoTrans, n, r, cols, m, cols, q, r, p, r)
}

// mulTN sets q = mᵀ·p.
func mulTN[T Float](mm gemm.Implementation, q, m, p []T, n, cols, r int) {
	gemmT(mm, blas.Trans, blas.NoTrans, cols, r, n, m, cols, p, r, q, r)
}

// mulNT sets m = p·qᵀ.
func mulNT[T Float](mm gemm.Implementation, m, p, q []T, n, cols, r int) {
	gemmT(mm, blas.NoTrans, blas.Trans, n, cols, r, p, r, q, r, m, cols)
}

// gemmT sets c = op(a)·op(b) (c is rows×cols, the inner dimension k) in
// T's precision.
func gemmT[T Float](mm gemm.Implementation, tA, tB blas.Transpose, rows, cols, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		mm.Sgemm(tA, tB, rows, cols, k, 1, a, lda, any(b).([]float32), ldb, 0, any(c).([]float32), ldc)
	case []float64:
		mm.Dgemm(tA, tB, rows, cols, k, 1, a, lda, any(b).([]float64), ldb, 0, any(c).([]float64), ldc)
	}
}

// orthogonalize makes the columns of the rows×cols matrix a orthonormal
// by Gram-Schmidt, in column order: each column is divided by its norm
// (plus eps), then its projection is taken off every later column
// (PyTorch's _orthogonalize_gram_schmidt). A column of norm 0 with eps 0
// is left zero. The work is row by row, so each pass reads a in memory
// order: the norm of column i, then all the dot products of column i
// with the later columns in one pass, then their updates in another.
func orthogonalize[T Float](a []T, rows, cols int, eps float64, dots []T) {
	dots = dots[:cols]
	for i := range cols {
		var ss T
		for r := range rows {
			v := a[r*cols+i]
			ss += v * v
		}
		norm := T(math.Sqrt(float64(ss))) + T(eps)
		if norm == 0 {
			for r := range rows {
				a[r*cols+i] = 0
			}
			continue
		}
		for r := range rows {
			a[r*cols+i] /= norm
		}
		if i == cols-1 {
			break
		}
		clear(dots)
		for r := range rows {
			row := a[r*cols : (r+1)*cols]
			ai := row[i]
			for j := i + 1; j < cols; j++ {
				dots[j] += ai * row[j]
			}
		}
		for r := range rows {
			row := a[r*cols : (r+1)*cols]
			ai := row[i]
			for j := i + 1; j < cols; j++ {
				row[j] -= dots[j] * ai
			}
		}
	}
}
