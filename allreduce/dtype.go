package allreduce

import (
	"fmt"
	"unsafe"

	"github.com/ringddp/ringddp/numeric"
)

// Numeric is the set of element types the collectives support.
type Numeric = numeric.Numeric

// DType names an element type on the wire.
type DType uint8

// The supported element types.
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float32 || d == Float64 }

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// DTypeOf is the DType of T.
func DTypeOf[T Numeric]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	}
	// A named type with one of the underlying types above.
	switch {
	case isFloat[T]() && unsafe.Sizeof(z) == 4:
		return Float32
	case isFloat[T]():
		return Float64
	case unsafe.Sizeof(z) == 4:
		return Int32
	default:
		return Int64
	}
}

func isFloat[T Numeric]() bool {
	var half T = 1
	half /= 2
	return half != 0
}

// asBytes views s as its raw bytes, without copying.
func asBytes[T Numeric](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// asElems views b as elements of T, without copying. len(b) must be a
// multiple of the element size and b suitably aligned.
func asElems[T Numeric](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}
