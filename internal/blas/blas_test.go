package blas

import (
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Setup's BLAS (OpenBLAS with -tags openblas) agrees with gonum's on the
// products gorgonia uses, for every transpose combination.
func TestSetupMatchesGonum(t *testing.T) {
	var ref gonum.Implementation
	impl, name, err := implementation(2)
	if err != nil {
		t.Fatal(err)
	}
	m, n, k := 7, 5, 3
	for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
		for _, tB := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			a := seq(m*k, 1)
			b := seq(k*n, 2)
			lda, ldb := k, n
			if tA != blas.NoTrans {
				lda = m
			}
			if tB != blas.NoTrans {
				ldb = k
			}
			want, got := seq(m*n, 3), seq(m*n, 3)
			ref.Dgemm(tA, tB, m, n, k, 1.5, a, lda, b, ldb, 0.5, want, n)
			impl.Dgemm(tA, tB, m, n, k, 1.5, a, lda, b, ldb, 0.5, got, n)
			for i := range want {
				if d := want[i] - got[i]; d > 1e-9 || d < -1e-9 {
					t.Fatalf("%s Dgemm %v %v: element %d got %v want %v", name, tA, tB, i, got[i], want[i])
				}
			}
		}
		x, y1, y2 := seq(max(m, n), 4), seq(max(m, n), 5), seq(max(m, n), 5)
		a := seq(m*n, 6)
		ref.Dgemv(tA, m, n, 2, a, n, x, 1, 0.25, y1, 1)
		impl.Dgemv(tA, m, n, 2, a, n, x, 1, 0.25, y2, 1)
		for i := range y1 {
			if d := y1[i] - y2[i]; d > 1e-9 || d < -1e-9 {
				t.Fatalf("%s Dgemv %v: element %d got %v want %v", name, tA, i, y2[i], y1[i])
			}
		}
	}
}

func seq(n int, seed float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64((i*7+int(seed)*3)%11) - 5
	}
	return out
}
