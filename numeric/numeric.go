// Package numeric is ringddp's one numeric vocabulary: the constraints on
// element types (Float, Numeric) and the element types' names, shared by
// the collectives (package allreduce: its wire types), the training
// packages (ddp, zero, optim), the trainer and the commands. It imports
// nothing of ringddp but the kernels below it (internal/half16, the 16-bit
// conversions' vector code, and what that imports), so every layer may use
// it.
package numeric

import "reflect"

// Float is the set of floating-point element types: parameters, gradients
// and optimizer state.
type Float interface{ ~float32 | ~float64 }

// Numeric is the set of element types the collectives support: Go's
// float32, float64, int32 and int64 (and named types over them), and the
// 16-bit floating-point types Float16 and BFloat16 themselves (not named
// types over them, nor uint16: their bits are not integers, and code
// generic over Numeric must never apply Go's arithmetic to them).
type Numeric interface {
	Arith | Float16 | BFloat16
}

// Arith is the element types of Numeric that Go's operators apply to:
// Numeric without the 16-bit floating-point types.
type Arith interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// The element types' names, as flags, checkpoints and errors spell them.
const (
	Float32 = "float32"
	Float64 = "float64"
	Int32   = "int32"
	Int64   = "int64"
	// The 16-bit types' names (the types themselves are Float16 and
	// BFloat16).
	NameFloat16  = "float16"
	NameBFloat16 = "bfloat16"
)

// NameOf is the name of T's underlying type, or float16 or bfloat16.
func NameOf[T Numeric]() string {
	switch reflect.TypeFor[T]() {
	case reflect.TypeFor[Float16]():
		return NameFloat16
	case reflect.TypeFor[BFloat16]():
		return NameBFloat16
	}
	return reflect.TypeFor[T]().Kind().String()
}
