package allreduce

import (
	"fmt"

	"github.com/ringddp/ringddp/numeric"
)

// ReduceOp is an element-wise reduction operator.
type ReduceOp uint8

// The reduction operators. Avg is Sum divided by the group size; it is
// defined for floating-point types only.
const (
	Sum ReduceOp = iota + 1
	Avg
	Max
	Min
	Prod
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Avg:
		return "Avg"
	case Max:
		return "Max"
	case Min:
		return "Min"
	case Prod:
		return "Prod"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

func (o ReduceOp) valid() bool { return o >= Sum && o <= Prod }

// arith is the element types with Go arithmetic: Numeric but the 16-bit
// floating-point types, whose bits are not numbers to Go (combine16.go).
// The kernels that apply Go's operators take only these, so no generic
// path can add 16-bit types as integers.
type arith = numeric.Arith

// combineElems sets out[i] = a[i] op b[i]. out may alias a or b. Max and Min
// propagate NaN.
func combineElems[T arith](op ReduceOp, out, a, b []T) {
	a = a[:len(out)]
	b = b[:len(out)]
	switch op {
	case Sum, Avg:
		// This loop is a visible share of a large all-reduce's CPU time (a
		// profile's figure is in docs/measurements.md); on amd64 with AVX2,
		// inputs of addVecMin elements or more go to vector kernels
		// (add_amd64.s). The result is bitwise identical to the Go loop:
		// each element gets the same single IEEE add with a as the first
		// operand (no FMA, no reassociation, so even NaN payloads match)
		// and integer adds wrap as in Go.
		if !addVec(out, a, b) {
			addElemsGo(out, a, b)
		}
	case Prod:
		for i := range out {
			out[i] = a[i] * b[i]
		}
	case Max:
		for i := range out {
			x, y := a[i], b[i]
			if y > x || y != y {
				x = y
			}
			out[i] = x
		}
	case Min:
		for i := range out {
			x, y := a[i], b[i]
			if y < x || y != y {
				x = y
			}
			out[i] = x
		}
	}
}

// addVecMin is the length below which Sum stays a plain Go loop: for a
// few elements the call into the vector kernel costs more than it saves.
const addVecMin = 16

// addElemsGo is the pure-Go Sum/Avg kernel: out[i] = a[i] + b[i]; a and b
// are at least as long as out, which may alias either. It is the fallback of
// addVec.
func addElemsGo[T arith](out, a, b []T) {
	a = a[:len(out)]
	b = b[:len(out)]
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

// combineBytes is combineElems on raw buffers of element type dt.
func combineBytes(dt DType, op ReduceOp, out, a, b []byte) {
	switch dt {
	case Float32:
		combineElems(op, asElems[float32](out), asElems[float32](a), asElems[float32](b))
	case Float64:
		combineElems(op, asElems[float64](out), asElems[float64](a), asElems[float64](b))
	case Int32:
		combineElems(op, asElems[int32](out), asElems[int32](a), asElems[int32](b))
	case Int64:
		combineElems(op, asElems[int64](out), asElems[int64](a), asElems[int64](b))
	case Float16:
		combine16(op, asElems[numeric.Float16](out), asElems[numeric.Float16](a), asElems[numeric.Float16](b),
			widenFloat16, narrowFloat16)
	case BFloat16:
		combine16(op, asElems[numeric.BFloat16](out), asElems[numeric.BFloat16](a), asElems[numeric.BFloat16](b),
			widenBFloat16, narrowBFloat16)
	}
}

// divideBytes divides every element of buf (floating point) by n; the
// 16-bit types round once (combine16.go).
func divideBytes(dt DType, buf []byte, n int) {
	switch dt {
	case Float32:
		divideElems(asElems[float32](buf), float32(n))
	case Float64:
		divideElems(asElems[float64](buf), float64(n))
	case Float16:
		divide16(asElems[numeric.Float16](buf), n, widenFloat16, narrowFloat16)
	case BFloat16:
		divide16(asElems[numeric.BFloat16](buf), n, widenBFloat16, narrowBFloat16)
	}
}

func divideElems[T float32 | float64](s []T, n T) {
	for i := range s {
		s[i] /= n
	}
}
