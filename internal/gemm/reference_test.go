package gemm

import (
	"github.com/ringddp/ringddp/internal/cpuvariant"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
)

// call is one gemm call's arguments, in float64; each test converts them to
// the element type it exercises.
type call struct {
	tA, tB        blas.Transpose
	m, n, k       int
	alpha, beta   float64
	a, b, c       []float64
	lda, ldb, ldc int
}

// newCall makes a call with random operands, leading dimensions pad
// elements wider than the matrices.
func newCall(rng *rand.Rand, tA, tB blas.Transpose, m, n, k, pad int, alpha, beta float64) call {
	rowsA, colsA := m, k
	if tA != blas.NoTrans {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if tB != blas.NoTrans {
		rowsB, colsB = n, k
	}
	cl := call{tA: tA, tB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		lda: max(1, colsA) + pad, ldb: max(1, colsB) + pad, ldc: max(1, n) + pad}
	cl.a = randoms(rng, max(0, rowsA*cl.lda))
	cl.b = randoms(rng, max(0, rowsB*cl.ldb))
	cl.c = randoms(rng, max(0, m*cl.ldc))
	return cl
}

func randoms(rng *rand.Rand, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = rng.Float64()*2 - 1
	}
	return s
}

func (cl call) opA(i, l int) float64 {
	if cl.tA == blas.NoTrans {
		return cl.a[i*cl.lda+l]
	}
	return cl.a[l*cl.lda+i]
}

func (cl call) opB(l, j int) float64 {
	if cl.tB == blas.NoTrans {
		return cl.b[l*cl.ldb+j]
	}
	return cl.b[j*cl.ldb+l]
}

// reference is the product computed in float64 by the definition, and
// for each element of C the bound on the rounding error of a float
// implementation with unit roundoff eps: (k+3)·eps·(Σ|alpha·a·b| + |beta·c|).
// Elements of C outside the m×n matrix (the padding) must stay as they were.
func (cl call) reference(eps float64) (want, tol []float64) {
	want = append([]float64(nil), cl.c...)
	tol = make([]float64, len(cl.c))
	for i := 0; i < cl.m; i++ {
		for j := 0; j < cl.n; j++ {
			at := i*cl.ldc + j
			sum, mag := 0.0, 0.0
			if cl.beta != 0 {
				sum = cl.beta * cl.c[at]
				mag = math.Abs(sum)
			}
			if cl.alpha != 0 {
				for l := 0; l < cl.k; l++ {
					t := cl.alpha * cl.opA(i, l) * cl.opB(l, j)
					sum += t
					mag += math.Abs(t)
				}
			}
			want[at] = sum
			tol[at] = float64(cl.k+3)*eps*mag + 1e-300
		}
	}
	return want, tol
}

// compare checks got against the reference: within tol for finite values,
// the same class (NaN, +Inf, -Inf) otherwise.
func compare(t *testing.T, what string, got, want, tol []float64) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		switch {
		case math.IsNaN(w) || math.IsInf(w, 0) || math.IsNaN(g) || math.IsInf(g, 0):
			if !(math.IsNaN(w) && math.IsNaN(g)) && g != w {
				t.Fatalf("%s: element %d = %v, want %v", what, i, g, w)
			}
		case math.Abs(g-w) > tol[i]:
			t.Fatalf("%s: element %d = %v, want %v ± %.3g", what, i, g, w, tol[i])
		}
	}
}

func to32(s []float64) []float32 {
	out := make([]float32, len(s))
	for i, v := range s {
		out[i] = float32(v)
	}
	return out
}

func from32(s []float32) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// to32Exact rounds the call's operands to float32 in place, so that the
// float64 reference sees exactly what the float32 product sees.
func (cl *call) to32Exact() {
	for _, s := range [][]float64{cl.a, cl.b, cl.c} {
		for i, v := range s {
			s[i] = float64(float32(v))
		}
	}
	cl.alpha, cl.beta = float64(float32(cl.alpha)), float64(float32(cl.beta))
}

// packedS runs the float32 product through the variant's packed path
// whatever its size (Sgemm sends tiny products to gonum).
func packedS(v Variant, threads int, cl call) []float64 {
	c := to32(cl.c)
	aT, bT := checkGemm(cl.tA, cl.tB, cl.m, cl.n, cl.k, len(cl.a), cl.lda, len(cl.b), cl.ldb, len(c), cl.ldc)
	p := &product[float32]{aT, bT, cl.m, cl.n, cl.k, float32(cl.alpha), to32(cl.a), cl.lda, to32(cl.b), cl.ldb, c, cl.ldc, false}
	compute(&v.K.f32, &buffers[float32]{}, threads, p, float32(cl.beta))
	return from32(c)
}

// packedD is packedS for float64.
func packedD(v Variant, threads int, cl call) []float64 {
	c := append([]float64(nil), cl.c...)
	aT, bT := checkGemm(cl.tA, cl.tB, cl.m, cl.n, cl.k, len(cl.a), cl.lda, len(cl.b), cl.ldb, len(c), cl.ldc)
	p := &product[float64]{aT, bT, cl.m, cl.n, cl.k, cl.alpha, cl.a, cl.lda, cl.b, cl.ldb, c, cl.ldc, false}
	compute(&v.K.f64, &buffers[float64]{}, threads, p, cl.beta)
	return c
}

const (
	eps32 = 0x1p-24
	eps64 = 0x1p-53
)

// assemblyVariantsHere returns the assembly variants this CPU runs and
// logs the ones it cannot, so that a run says what it did not test. Each
// variant with a few-row kernel comes twice: as it is, and as
// "NAME/few", whose main kernels are the few-row ones, so that every
// test runs both micro-kernels at every shape.
func assemblyVariantsHere(t *testing.T) []Variant {
	t.Helper()
	here, skipped := cpuvariant.Split(allVariants())
	if skipped != "" {
		t.Log(skipped)
	}
	if len(here) == 0 {
		t.Skip("no assembly variant runs on this CPU")
	}
	var out []Variant
	for _, v := range here {
		out = append(out, v)
		if v.K.few32.kernel != nil {
			few := v
			few.Name += "/few"
			few.K.f32, few.K.f64 = v.K.few32, v.K.few64
			out = append(out, few)
		}
	}
	return out
}
