package gemm

import "gonum.org/v1/gonum/blas"

// The panic messages of gonum's BLAS, so that a caller sees the same
// failure whichever implementation is in use.
const (
	badTranspose = "blas: illegal transpose"
	mLT0         = "blas: m < 0"
	nLT0         = "blas: n < 0"
	kLT0         = "blas: k < 0"
	badLdA       = "blas: bad leading dimension of A"
	badLdB       = "blas: bad leading dimension of B"
	badLdC       = "blas: bad leading dimension of C"
	shortA       = "blas: insufficient length of a"
	shortB       = "blas: insufficient length of b"
	shortC       = "blas: insufficient length of c"
)

// checkGemm panics, in gonum's order and with gonum's messages, on
// arguments the BLAS contract forbids. It reports whether A and B are
// transposed. Slice lengths are checked only when m and n are positive,
// as gonum does (a product with no elements reads nothing).
func checkGemm(tA, tB blas.Transpose, m, n, k, la, lda, lb, ldb, lc, ldc int) (aTrans, bTrans bool) {
	aTrans, okA := isTrans(tA)
	bTrans, okB := isTrans(tB)
	switch {
	case !okA || !okB:
		panic(badTranspose)
	case m < 0:
		panic(mLT0)
	case n < 0:
		panic(nLT0)
	case k < 0:
		panic(kLT0)
	}
	rowsA, colsA := m, k
	if aTrans {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if bTrans {
		rowsB, colsB = n, k
	}
	switch {
	case lda < max(1, colsA):
		panic(badLdA)
	case ldb < max(1, colsB):
		panic(badLdB)
	case ldc < max(1, n):
		panic(badLdC)
	}
	if m == 0 || n == 0 {
		return aTrans, bTrans
	}
	switch {
	case la < (rowsA-1)*lda+colsA:
		panic(shortA)
	case lb < (rowsB-1)*ldb+colsB:
		panic(shortB)
	case lc < (m-1)*ldc+n:
		panic(shortC)
	}
	return aTrans, bTrans
}

// isTrans maps a transpose flag to whether it transposes (real matrices:
// ConjTrans is Trans) and whether the flag is valid.
func isTrans(t blas.Transpose) (trans, ok bool) {
	switch t {
	case blas.NoTrans:
		return false, true
	case blas.Trans, blas.ConjTrans:
		return true, true
	}
	return false, false
}
