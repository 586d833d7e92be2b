//go:build openblas

package blas

/*
#cgo LDFLAGS: -lopenblas
void openblas_set_num_threads(int num_threads);
void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha,
	const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_dgemm(int order, int transA, int transB, int m, int n, int k, double alpha,
	const double *a, int lda, const double *b, int ldb, double beta, double *c, int ldc);
void cblas_sgemv(int order, int transA, int m, int n, float alpha, const float *a, int lda,
	const float *x, int incX, float beta, float *y, int incY);
void cblas_dgemv(int order, int transA, int m, int n, double alpha, const double *a, int lda,
	const double *x, int incX, double beta, double *y, int incY);
*/
import "C"

import (
	"os"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"
)

// CBLAS enumerations (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// openBLAS is gonum's pure-Go BLAS with the routines that dominate
// training — general matrix-matrix and matrix-vector products — replaced
// by OpenBLAS's. Arguments are checked by gonum's rules before the call.
type openBLAS struct{ gonum.Implementation }

func trans(t blas.Transpose) C.int {
	if t == blas.NoTrans {
		return cblasNoTrans
	}
	return cblasTrans
}

func (o openBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 || len(c) == 0 || (k > 0 && (len(a) == 0 || len(b) == 0)) {
		o.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	C.cblas_sgemm(cblasRowMajor, trans(tA), trans(tB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}

func (o openBLAS) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if m == 0 || n == 0 || len(c) == 0 || (k > 0 && (len(a) == 0 || len(b) == 0)) {
		o.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	C.cblas_dgemm(cblasRowMajor, trans(tA), trans(tB), C.int(m), C.int(n), C.int(k), C.double(alpha),
		(*C.double)(&a[0]), C.int(lda), (*C.double)(&b[0]), C.int(ldb), C.double(beta), (*C.double)(&c[0]), C.int(ldc))
}

func (o openBLAS) Sgemv(tA blas.Transpose, m, n int, alpha float32, a []float32, lda int, x []float32, incX int, beta float32, y []float32, incY int) {
	if m == 0 || n == 0 || incX <= 0 || incY <= 0 || len(a) == 0 || len(x) == 0 || len(y) == 0 {
		o.Implementation.Sgemv(tA, m, n, alpha, a, lda, x, incX, beta, y, incY)
		return
	}
	checkGemv(tA, m, n, len(a), lda, len(x), incX, len(y), incY)
	C.cblas_sgemv(cblasRowMajor, trans(tA), C.int(m), C.int(n), C.float(alpha), (*C.float)(&a[0]), C.int(lda),
		(*C.float)(&x[0]), C.int(incX), C.float(beta), (*C.float)(&y[0]), C.int(incY))
}

func (o openBLAS) Dgemv(tA blas.Transpose, m, n int, alpha float64, a []float64, lda int, x []float64, incX int, beta float64, y []float64, incY int) {
	if m == 0 || n == 0 || incX <= 0 || incY <= 0 || len(a) == 0 || len(x) == 0 || len(y) == 0 {
		o.Implementation.Dgemv(tA, m, n, alpha, a, lda, x, incX, beta, y, incY)
		return
	}
	checkGemv(tA, m, n, len(a), lda, len(x), incX, len(y), incY)
	C.cblas_dgemv(cblasRowMajor, trans(tA), C.int(m), C.int(n), C.double(alpha), (*C.double)(&a[0]), C.int(lda),
		(*C.double)(&x[0]), C.int(incX), C.double(beta), (*C.double)(&y[0]), C.int(incY))
}

// checkGemm panics, as gonum does, when the slices are too short for the
// dimensions: C must never read or write past them.
func checkGemm(tA, tB blas.Transpose, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	rowA, colA := m, k
	if tA != blas.NoTrans {
		rowA, colA = k, m
	}
	rowB, colB := k, n
	if tB != blas.NoTrans {
		rowB, colB = n, k
	}
	if lda < max(1, colA) || ldb < max(1, colB) || ldc < max(1, n) ||
		la < lda*(rowA-1)+colA || lb < ldb*(rowB-1)+colB || lc < ldc*(m-1)+n {
		panic("blas: gemm slice too short for its dimensions")
	}
}

func checkGemv(tA blas.Transpose, m, n, la, lda, lx, incX, ly, incY int) {
	lenX, lenY := n, m
	if tA != blas.NoTrans {
		lenX, lenY = m, n
	}
	if lda < max(1, n) || la < lda*(m-1)+n || lx < 1+(lenX-1)*incX || ly < 1+(lenY-1)*incY {
		panic("blas: gemv slice too short for its dimensions")
	}
}

// implementation is the BLAS Setup selects, and its name.
func implementation(threads int) (G.BLAS, string, error) {
	if os.Getenv("OPENBLAS_NUM_THREADS") == "" {
		C.openblas_set_num_threads(C.int(max(1, threads)))
	}
	return openBLAS{}, "openblas", nil
}
