package allreduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveVecAdd reports whether the CPU supports AVX2 (and the OS saves the
// YMM state), so that addElemsVec runs vector code. It is read once at
// package init and never written again.
var haveVecAdd = cpu.X86.HasAVX2

// The AVX2 add kernels in add_amd64.s set out[i] = a[i] + b[i] for
// i < n, n >= 0. out may alias a or b exactly; partial overlaps are not
// supported. Pointers need no alignment. Each loop iteration handles four
// YMM registers (128 bytes), then single YMM registers, then a scalar tail.

//go:noescape
func addFloat32AVX2(out, a, b *float32, n int)

//go:noescape
func addFloat64AVX2(out, a, b *float64, n int)

//go:noescape
func addInt32AVX2(out, a, b *int32, n int)

//go:noescape
func addInt64AVX2(out, a, b *int64, n int)

// addVec runs out[i] = a[i] + b[i] through the AVX2 kernels when that pays: len(out) is
// at least addVecMin and the CPU has AVX2. It reports whether it did; if not,
// the caller runs the Go loop. It is small enough to be inlined, so short
// inputs (the 8-byte latency path adds 2 elements) pay no extra call.
func addVec[T arith](out, a, b []T) bool {
	if len(out) < addVecMin || !haveVecAdd {
		return false
	}
	addElemsVec(out, a, b)
	return true
}

// addElemsVec is the Sum kernel through the AVX2 kernels for any length, with no
// short-input fast path. Callers must have checked haveVecAdd.
func addElemsVec[T arith](out, a, b []T) {
	n := len(out)
	if n == 0 {
		return
	}
	a, b = a[:n], b[:n] // bounds check, as the scalar loop would panic
	var z T
	po := unsafe.Pointer(unsafe.SliceData(out))
	pa := unsafe.Pointer(unsafe.SliceData(a))
	pb := unsafe.Pointer(unsafe.SliceData(b))
	if unsafe.Sizeof(z) == 4 {
		if isFloat[T]() {
			addFloat32AVX2((*float32)(po), (*float32)(pa), (*float32)(pb), n)
		} else {
			addInt32AVX2((*int32)(po), (*int32)(pa), (*int32)(pb), n)
		}
	} else {
		if isFloat[T]() {
			addFloat64AVX2((*float64)(po), (*float64)(pa), (*float64)(pb), n)
		} else {
			addInt64AVX2((*int64)(po), (*int64)(pa), (*int64)(pb), n)
		}
	}
}
