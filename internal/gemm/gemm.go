package gemm

import (
	"runtime"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// smallProduct is the largest m·n·k left to gonum: packing costs more
// than it saves on products that small.
const smallProduct = 8 * 8 * 8

// Implementation is gonum's BLAS with Sgemm and Dgemm computed by one
// variant's packed kernels; it satisfies gonum's blas.Float32 and
// blas.Float64, which gorgonia and tensor call. The zero value is not
// ready: use New.
type Implementation struct {
	gonum.Implementation
	variant Variant
	threads int
	f32     *buffers[float32]
	f64     *buffers[float64]
}

// New returns the variant's implementation running at most threads
// goroutines per product (0: GOMAXPROCS at each call).
func New(v Variant, threads int) Implementation {
	return Implementation{variant: v, threads: threads, f32: &buffers[float32]{}, f64: &buffers[float64]{}}
}

// Name is the variant's name, for reports ("avx512", "avx2", "gonum").
func (impl Implementation) Name() string { return impl.variant.Name }

// Threads is the most goroutines one product runs.
func (impl Implementation) Threads() int {
	if impl.threads > 0 {
		return impl.threads
	}
	return runtime.GOMAXPROCS(0)
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for float32 (BLAS sgemm,
// row-major).
func (impl Implementation) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	bl := pick(&impl.variant.K.f32, &impl.variant.K.few32, m)
	if bl.kernel == nil || m*n*k <= smallProduct {
		impl.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	aT, bT := checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	compute(bl, impl.f32, impl.Threads(), &product[float32]{aT, bT, m, n, k, alpha, a, lda, b, ldb, c, ldc, false}, beta)
}

// Dgemm computes C = alpha·op(A)·op(B) + beta·C for float64 (BLAS dgemm,
// row-major).
func (impl Implementation) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	bl := pick(&impl.variant.K.f64, &impl.variant.K.few64, m)
	if bl.kernel == nil || m*n*k <= smallProduct {
		impl.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	aT, bT := checkGemm(tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	compute(bl, impl.f64, impl.Threads(), &product[float64]{aT, bT, m, n, k, alpha, a, lda, b, ldb, c, ldc, false}, beta)
}

// compute sets C = alpha·op(A)·op(B) + beta·C. With alpha = 0 (or k = 0)
// it only scales C: A and B are not read, as BLAS specifies. With beta = 0
// the product's first block overwrites C (NaN and Inf in C do not
// survive); otherwise C is scaled by beta first.
func compute[T scalar](bl *blocking[T], pool *buffers[T], threads int, p *product[T], beta T) {
	if p.alpha == 0 || p.k == 0 {
		scaleC(beta, p.m, p.n, p.c, p.ldc)
		return
	}
	p.set = beta == 0
	if !p.set {
		scaleC(beta, p.m, p.n, p.c, p.ldc)
	}
	run(bl, pool, p, split(p.m, p.n, p.k, bl.mr, bl.nr, threads))
}
