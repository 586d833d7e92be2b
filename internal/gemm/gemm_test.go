package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

var transposes = []blas.Transpose{blas.NoTrans, blas.Trans}

// shapes covers 1, 0, primes, sizes around the micro-kernels' blocks (6,
// 8, 14, 16, 32) and past the cache blocks (kc = 256, mc = 168).
var shapes = [][3]int{
	{1, 1, 1}, {0, 5, 3}, {5, 0, 3}, {4, 5, 0}, {1, 33, 7}, {15, 1, 9},
	{13, 17, 19}, {14, 32, 5}, {6, 16, 3}, {7, 9, 257}, {29, 65, 31},
	{37, 41, 300}, {170, 35, 12}, {3, 200, 2},
}

// sweepShapes is shapes, or its first few under the race detector (the
// arithmetic has no goroutines to race; the threads test covers those).
func sweepShapes() [][3]int {
	if raceEnabled {
		return shapes[:5]
	}
	return shapes
}

func TestVariantsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v := range assemblyVariantsHere(t) {
		for _, sh := range sweepShapes() {
			for _, tA := range transposes {
				for _, tB := range transposes {
					for _, alpha := range []float64{0, 1, -2.5} {
						for _, beta := range []float64{0, 1, 0.5} {
							pad := rng.IntN(3)
							cl := newCall(rng, tA, tB, sh[0], sh[1], sh[2], pad, alpha, beta)
							what := fmt.Sprintf("%s %v %v m=%d n=%d k=%d pad=%d alpha=%v beta=%v", v.Name, tA, tB, sh[0], sh[1], sh[2], pad, alpha, beta)
							want, tol := cl.reference(eps64)
							compare(t, "d "+what, packedD(v, 1, cl), want, tol)
							cl.to32Exact()
							want, tol = cl.reference(eps32)
							compare(t, "s "+what, packedS(v, 1, cl), want, tol)
						}
					}
				}
			}
		}
	}
}

// beta = 0 overwrites C, NaN and Inf included; alpha = 0 reads neither A nor B.
func TestBetaZeroOverwritesAlphaZeroSkips(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, v := range assemblyVariantsHere(t) {
		cl := newCall(rng, blas.NoTrans, blas.Trans, 20, 40, 30, 1, 1, 0)
		for i := range cl.c {
			cl.c[i] = math.NaN()
		}
		want, tol := cl.reference(eps64)
		for i := 0; i < cl.m; i++ { // the padding keeps its NaN; the matrix must not
			for j := 0; j < cl.n; j++ {
				if math.IsNaN(want[i*cl.ldc+j]) {
					t.Fatal("reference kept NaN")
				}
			}
		}
		compare(t, v.Name+" beta=0 over NaN", packedD(v, 1, cl), want, tol)
		cl.alpha, cl.beta = 0, 0.5
		for i := range cl.a {
			cl.a[i] = math.NaN()
		}
		for i := range cl.c {
			cl.c[i] = 2
		}
		want, tol = cl.reference(eps64)
		compare(t, v.Name+" alpha=0 with NaN in A", packedD(v, 1, cl), want, tol)
	}
}

// NaN and ±Inf in A or B reach exactly the elements of C they should.
func TestSpecialValuesPropagate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0x1p-1060, 0x1p-140}
	for _, v := range assemblyVariantsHere(t) {
		for trial := 0; trial < 40; trial++ {
			tA, tB := transposes[trial%2], transposes[trial/2%2]
			cl := newCall(rng, tA, tB, 1+rng.IntN(40), 1+rng.IntN(40), 1+rng.IntN(40), rng.IntN(2), -2.5, 0.5)
			for range 3 {
				s := specials[rng.IntN(len(specials))]
				if rng.IntN(2) == 0 {
					cl.a[rng.IntN(len(cl.a))] = s
				} else {
					cl.b[rng.IntN(len(cl.b))] = s
				}
			}
			want, tol := cl.reference(eps64)
			compare(t, fmt.Sprintf("%s specials trial %d", v.Name, trial), packedD(v, 1, cl), want, tol)
			cl.to32Exact()
			want, tol = cl.reference(eps32)
			compare(t, fmt.Sprintf("%s specials f32 trial %d", v.Name, trial), packedS(v, 1, cl), want, tol)
		}
	}
}

// Threads split M and N only: 1, 2, 3 and 4 threads give the same bits.
func TestThreadsAreBitwiseNeutral(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, v := range assemblyVariantsHere(t) {
		for _, sh := range [][3]int{{300, 200, 70}, {64, 700, 90}, {257, 129, 300}} {
			cl := newCall(rng, blas.Trans, blas.NoTrans, sh[0], sh[1], sh[2], 3, 1.5, 0.5)
			one := packedD(v, 1, cl)
			one32 := packedS(v, 1, cl)
			for _, threads := range []int{2, 3, 4} {
				if got := packedD(v, threads, cl); !slices.Equal(got, one) {
					t.Fatalf("%s d %v: %d threads differ from 1", v.Name, sh, threads)
				}
				if got := packedS(v, threads, cl); !slices.Equal(got, one32) {
					t.Fatalf("%s s %v: %d threads differ from 1", v.Name, sh, threads)
				}
			}
			if parts := split(sh[0], sh[1], sh[2], v.K.f32.mr, v.K.f32.nr, 4); len(parts) < 2 {
				t.Fatalf("%v: split into %d parts; the test needs several", sh, len(parts))
			}
		}
	}
}

// The public Sgemm and Dgemm agree with gonum's on every size, tiny
// products (which go to gonum) included.
func TestImplementationMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var ref gonum.Implementation
	for _, v := range Variants() {
		impl := New(v, 2)
		for _, sh := range append(sweepShapes(), [3]int{256, 256, 128}, [3]int{2, 2, 2}) {
			for _, tA := range transposes {
				for _, tB := range transposes {
					cl := newCall(rng, tA, tB, sh[0], sh[1], sh[2], 1, -2.5, 0.5)
					want := append([]float64(nil), cl.c...)
					got := append([]float64(nil), cl.c...)
					ref.Dgemm(tA, tB, cl.m, cl.n, cl.k, cl.alpha, cl.a, cl.lda, cl.b, cl.ldb, cl.beta, want, cl.ldc)
					impl.Dgemm(tA, tB, cl.m, cl.n, cl.k, cl.alpha, cl.a, cl.lda, cl.b, cl.ldb, cl.beta, got, cl.ldc)
					_, tol := cl.reference(eps64)
					compare(t, fmt.Sprintf("%s Dgemm %v %v %v", v.Name, tA, tB, sh), got, want, scale(tol, 2))
					a, b, c32, w32 := to32(cl.a), to32(cl.b), to32(cl.c), to32(cl.c)
					ref.Sgemm(tA, tB, cl.m, cl.n, cl.k, float32(cl.alpha), a, cl.lda, b, cl.ldb, float32(cl.beta), w32, cl.ldc)
					impl.Sgemm(tA, tB, cl.m, cl.n, cl.k, float32(cl.alpha), a, cl.lda, b, cl.ldb, float32(cl.beta), c32, cl.ldc)
					cl.to32Exact()
					_, tol = cl.reference(eps32)
					compare(t, fmt.Sprintf("%s Sgemm %v %v %v", v.Name, tA, tB, sh), from32(c32), from32(w32), scale(tol, 2))
				}
			}
		}
	}
}

func scale(s []float64, f float64) []float64 {
	for i := range s {
		s[i] *= f
	}
	return s
}

// Arguments the BLAS contract forbids panic with gonum's message, before
// anything is read or written.
func TestBadArgumentsPanicAsGonum(t *testing.T) {
	s := make([]float32, 100)
	cases := []struct {
		tA, tB           blas.Transpose
		m, n, k, lda, ld int
		a, c             []float32
	}{
		{tA: 'x', tB: blas.NoTrans, m: 2, n: 2, k: 2, lda: 2, ld: 2, a: s, c: s},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: -1, n: 2, k: 2, lda: 2, ld: 2, a: s, c: s},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 2, n: -2, k: 2, lda: 2, ld: 2, a: s, c: s},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 2, n: 2, k: -3, lda: 2, ld: 2, a: s, c: s},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 20, n: 20, k: 20, lda: 19, ld: 20, a: s, c: s},
		{tA: blas.Trans, tB: blas.NoTrans, m: 20, n: 20, k: 20, lda: 20, ld: 20, a: s[:50], c: s},
		{tA: blas.NoTrans, tB: blas.Trans, m: 20, n: 20, k: 20, lda: 20, ld: 20, a: make([]float32, 400), c: s},
	}
	for _, v := range Variants() {
		impl := New(v, 1)
		for i, tc := range cases {
			want := panicOf(func() {
				gonum.Implementation{}.Sgemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 1, tc.a, tc.lda, s, tc.ld, 0, tc.c, tc.ld)
			})
			got := panicOf(func() {
				impl.Sgemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 1, tc.a, tc.lda, s, tc.ld, 0, tc.c, tc.ld)
			})
			if want == nil || got != want {
				t.Errorf("%s case %d: panic %v, gonum's %v", v.Name, i, got, want)
			}
		}
	}
}

func panicOf(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

func TestLookupNamesWhatThisCPURuns(t *testing.T) {
	if _, err := Lookup("gonum"); err != nil {
		t.Fatal(err)
	}
	_, err := Lookup("sse1")
	if err == nil || !contains(err.Error(), "is not a variant") || !contains(err.Error(), "gonum") {
		t.Fatalf("Lookup(sse1) = %v", err)
	}
	t.Setenv(VariantEnv, "gonum")
	if v, err := Best(); err != nil || v.Name != "gonum" {
		t.Fatalf("Best with %s=gonum: %v %v", VariantEnv, v.Name, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Rows of A a multiple of 4 KiB apart are packed (see blockOfA); alpha = 1
// with whole rows reads A in place. Both agree with the reference.
func TestStridesOfAInPlaceAndPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, v := range assemblyVariantsHere(t) {
		for _, tA := range transposes {
			for _, lda := range []int{1024, 1023, 512} {
				m, k := 45, 33
				cols := k
				if tA == blas.Trans {
					cols = m
				}
				cl := newCall(rng, tA, blas.NoTrans, m, 50, k, lda-cols, 1, 0.5)
				want, tol := cl.reference(eps64)
				compare(t, fmt.Sprintf("%s d %v lda=%d", v.Name, tA, cl.lda), packedD(v, 1, cl), want, tol)
				cl.to32Exact()
				want, tol = cl.reference(eps32)
				compare(t, fmt.Sprintf("%s s %v lda=%d", v.Name, tA, cl.lda), packedS(v, 1, cl), want, tol)
			}
		}
	}
}

// A row-major B is read in place unless its rows are a multiple of 4 KiB
// apart (see panelOfB); a transposed one is packed. All agree with the
// reference, with the last micro-panel partial or not.
func TestStridesOfBInPlaceAndPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, v := range assemblyVariantsHere(t) {
		for _, tB := range transposes {
			for _, ldb := range []int{1024, 1023, 512} {
				for _, n := range []int{64, 70} {
					k := 33
					cols := n
					if tB == blas.Trans {
						cols = k
					}
					cl := newCall(rng, blas.NoTrans, tB, 30, n, k, ldb-cols, 1, 0)
					want, tol := cl.reference(eps64)
					compare(t, fmt.Sprintf("%s d %v ldb=%d n=%d", v.Name, tB, cl.ldb, n), packedD(v, 1, cl), want, tol)
					cl.to32Exact()
					want, tol = cl.reference(eps32)
					compare(t, fmt.Sprintf("%s s %v ldb=%d n=%d", v.Name, tB, cl.ldb, n), packedS(v, 1, cl), want, tol)
				}
			}
		}
	}
}

// pick gives the few-row kernel only where it pads m to fewer rows.
func TestPickFewRowKernel(t *testing.T) {
	main := &blocking[float32]{kernel: sgemmKernelStub, mr: 14}
	few := &blocking[float32]{kernel: sgemmKernelStub, mr: 8}
	for m, wantFew := range map[int]bool{1: true, 8: true, 9: false, 14: false, 15: true, 16: true, 24: true, 25: false, 28: false, 40: false} {
		if got := pick(main, few, m) == few; got != wantFew {
			t.Errorf("m=%d: few-row kernel %t, want %t", m, got, wantFew)
		}
	}
	if pick(main, &blocking[float32]{mr: 8}, 8) != main {
		t.Error("a variant without a few-row kernel must keep its main one")
	}
}

func sgemmKernelStub(int, *float32, int, int, *float32, int, *float32, int, int) {}
