package allreduce

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ringddp/ringddp/numeric"
)

// Numeric is the set of element types the collectives support.
type Numeric = numeric.Numeric

// DType names an element type on the wire.
type DType uint8

// The supported element types. Float16 and BFloat16 are the 16-bit
// floating-point types numeric.Float16 and numeric.BFloat16; their
// reductions compute in float32 and round once per step (combine16.go).
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
	Float16
	BFloat16
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

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
	case Float16:
		return numeric.NameFloat16
	case BFloat16:
		return numeric.NameBFloat16
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
	case numeric.Float16:
		return Float16
	case numeric.BFloat16:
		return BFloat16
	}
	// A named type with one of the underlying types above (Numeric admits
	// no named type over the 16-bit ones).
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Float32:
		return Float32
	case reflect.Float64:
		return Float64
	case reflect.Int32:
		return Int32
	}
	return Int64
}

// isFloat reports whether T, one of the types with Go arithmetic, is a
// floating-point type.
func isFloat[T arith]() bool {
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
