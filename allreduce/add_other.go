//go:build !amd64

package allreduce

// haveVecAdd reports whether addElemsVec runs vector code on this machine.
const haveVecAdd = false

// addVec reports false: only amd64 has vector add kernels (add_amd64.s), so
// Sum always runs the Go loop here.
func addVec[T arith](out, a, b []T) bool { return false }

// addElemsVec is addElemsGo: there are no vector kernels on this platform.
func addElemsVec[T arith](out, a, b []T) { addElemsGo(out, a, b) }
