// Package numeric is ringddp's one numeric vocabulary: the constraints on
// element types (Float, Numeric) and the element types' names, shared by
// the collectives (package allreduce: its wire types), the training
// packages (ddp, zero, optim), the trainer and the commands. It imports
// nothing of ringddp, so every layer may use it.
package numeric

import "reflect"

// Float is the set of floating-point element types: parameters, gradients
// and optimizer state.
type Float interface{ ~float32 | ~float64 }

// Numeric is the set of element types the collectives support.
type Numeric interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// The element types' names, as flags, checkpoints and errors spell them.
const (
	Float32 = "float32"
	Float64 = "float64"
	Int32   = "int32"
	Int64   = "int64"
)

// NameOf is the name of T's underlying type.
func NameOf[T Numeric]() string { return reflect.TypeFor[T]().Kind().String() }
