package allreducetest

// The 16-bit floating-point element types (numeric.Float16 and
// numeric.BFloat16) in the matrix and the exactness check. Their bits are
// not numbers to Go, so they get their own inputs and references, computed
// here on float32 values with the conversions of package numeric (tested on
// their own against a float64 reference), never with the collectives'
// kernels: each combine step widens both operands to float32, applies the
// operator in float32, and rounds once to the 16-bit type (to nearest, ties
// to even; a NaN to the type's canonical quiet NaN); Avg's division is one
// more such step.

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/run/reference"
	"github.com/ringddp/ringddp/numeric"
)

// AllHalfDTypes are the 16-bit element types.
var AllHalfDTypes = []allreduce.DType{allreduce.Float16, allreduce.BFloat16}

// half is a 16-bit floating-point element type.
type half interface {
	numeric.Float16 | numeric.BFloat16
}

// widen is h as a float32 (exactly).
func widen[H half](h H) float32 {
	if f, ok := any(h).(numeric.Float16); ok {
		return f.Float32()
	}
	return numeric.BFloat16(h).Float32()
}

// narrow is f rounded to H as one combine step rounds: to nearest, ties to
// even, a NaN to H's canonical quiet NaN.
func narrow[H half](f float32) H {
	var z H
	_, f16 := any(z).(numeric.Float16)
	switch {
	case f != f && f16:
		return 0x7e00
	case f != f:
		return 0x7fc0
	case f16:
		return H(numeric.Float16FromFloat32(f))
	}
	return H(numeric.BFloat16FromFloat32(f))
}

// isCanonicalNaN reports whether h is H's canonical quiet NaN.
func isCanonicalNaN[H half](h H) bool { return h == narrow[H](float32(math.NaN())) }

// combineRef is one combine step of a and b in float32, as the Float32
// dtype defines each operator (Max and Min propagate NaN, the second
// operand's when both are NaN), rounded once.
func combineRef[H half](op allreduce.ReduceOp, a, b H) H {
	x, y := widen(a), widen(b)
	switch op {
	case allreduce.Sum, allreduce.Avg:
		x += y
	case allreduce.Prod:
		x *= y
	case allreduce.Max:
		if y > x || y != y {
			x = y
		}
	case allreduce.Min:
		if y < x || y != y {
			x = y
		}
	}
	return narrow[H](x)
}

// halfReduce is the sequential reference of the 16-bit types: inputs
// combined in rank order, one rounding per step, Avg's sum divided by the
// rank count in one more step. A group of one rank combines nothing (Avg
// included), so its input comes back bit for bit.
func halfReduce[H half](inputs [][]H, op allreduce.ReduceOp) []H {
	out := append([]H(nil), inputs[0]...)
	if len(inputs) == 1 {
		return out
	}
	for _, in := range inputs[1:] {
		for i, x := range in {
			out[i] = combineRef(op, out[i], x)
		}
	}
	if op == allreduce.Avg {
		for i, s := range out {
			out[i] = narrow[H](widen(s) / float32(len(inputs)))
		}
	}
	return out
}

// halfInput is rank's matrix input of n elements of H for op: small
// integers (Prod: -1, 1 or 2, few 2s, as reference.Input), so that every
// partial sum of up to 64 ranks is exact in either 16-bit type, and every
// reduction order gives the reference's bits.
func halfInput[H half](seed uint64, rank, n int, op allreduce.ReduceOp) []H {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	out := make([]H, n)
	for i := range out {
		v := float32(rng.IntN(9) - 4)
		if op == allreduce.Prod {
			v = float32([]int{2, -1, -1, -1, 1}[min(rng.IntN(16), 4)])
		}
		out[i] = narrow[H](v)
	}
	return out
}

// inputOf is the matrix input of any element type: reference.Input's, or
// halfInput's for the 16-bit types.
func inputOf[T allreduce.Numeric](seed uint64, rank, n int, op allreduce.ReduceOp) []T {
	var out any
	switch any(*new(T)).(type) {
	case float32:
		out = reference.Input[float32](seed, rank, n, op)
	case float64:
		out = reference.Input[float64](seed, rank, n, op)
	case int32:
		out = reference.Input[int32](seed, rank, n, op)
	case int64:
		out = reference.Input[int64](seed, rank, n, op)
	case numeric.Float16:
		out = halfInput[numeric.Float16](seed, rank, n, op)
	case numeric.BFloat16:
		out = halfInput[numeric.BFloat16](seed, rank, n, op)
	}
	return out.([]T)
}

// reduceOf is the sequential reference of any element type:
// reference.Reduce, or halfReduce for the 16-bit types.
func reduceOf[T allreduce.Numeric](inputs [][]T, op allreduce.ReduceOp) []T {
	var out any
	switch in := any(inputs).(type) {
	case [][]float32:
		out = reference.Reduce(in, op)
	case [][]float64:
		out = reference.Reduce(in, op)
	case [][]int32:
		out = reference.Reduce(in, op)
	case [][]int64:
		out = reference.Reduce(in, op)
	case [][]numeric.Float16:
		out = halfReduce(in, op)
	case [][]numeric.BFloat16:
		out = halfReduce(in, op)
	default:
		panic(fmt.Sprintf("allreducetest: no reference for %T", inputs))
	}
	return out.([]T)
}

// Special values of the 16-bit types, for the exactness check: NaNs of
// both signs, with payloads, quiet and signalling.
var (
	nanBitsF16  = []uint16{0x7e00, 0xfe00, 0x7e01, 0x7d00, 0xff45}
	nanBitsBF16 = []uint16{0x7fc0, 0xffc0, 0x7fc1, 0x7fa0, 0xffd3}
)

// halfSpecialInput is SpecialInput for a 16-bit type: the same lanes
// (small integers; in lane 3 mod 4 small multiples of H's smallest
// subnormal, which add exactly; Prod's -1, 1 and 2) and specials (±0, ±Inf,
// NaNs), so that every reduction order gives the reference's value.
func halfSpecialInput[H half](seed uint64, rank, count int, op allreduce.ReduceOp) []H {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	out := make([]H, count)
	_, f16 := any(*new(H)).(numeric.Float16)
	nans, tiny := nanBitsBF16, float32(0x1p-133)
	if f16 {
		nans, tiny = nanBitsF16, 0x1p-24
	}
	for i := range out {
		switch special := rng.IntN(4) == 0; {
		case special && rng.IntN(5) == 4:
			out[i] = H(nans[rng.IntN(len(nans))])
		case special:
			out[i] = narrow[H]([]float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(4)])
		case i%4 == 3 && op != allreduce.Prod:
			out[i] = narrow[H](tiny * float32(rng.IntN(7)-3))
		case op == allreduce.Prod:
			out[i] = narrow[H](float32([]int{-1, 1, 1, 2}[rng.IntN(4)]))
		default:
			out[i] = narrow[H](float32(rng.IntN(11) - 5))
		}
	}
	return out
}

// halfMatches compares got with want as matchesReference does (NaN for
// NaN; for Sum, Avg and Prod the sign of zero too) and, where combine
// steps made the value (more than one rank), requires each NaN to be the
// canonical one.
func halfMatches[H half](got, want []H, op allreduce.ReduceOp, n, off int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	g32, w32 := make([]float32, len(got)), make([]float32, len(want))
	for k := range got {
		g32[k], w32[k] = widen(got[k]), widen(want[k])
		if n > 1 && g32[k] != g32[k] && !isCanonicalNaN(got[k]) {
			return fmt.Errorf("element %d is the NaN %#04x, want the canonical NaN", off+k, uint16(got[k]))
		}
	}
	return matchesReference(g32, w32, op, off)
}

// specialInputOf is SpecialInput for any element type: halfSpecialInput's
// for the 16-bit types.
func specialInputOf[T allreduce.Numeric](seed uint64, rank, count int, op allreduce.ReduceOp) []T {
	var out any
	switch any(*new(T)).(type) {
	case float32:
		out = SpecialInput[float32](seed, rank, count, op)
	case float64:
		out = SpecialInput[float64](seed, rank, count, op)
	case int32:
		out = SpecialInput[int32](seed, rank, count, op)
	case int64:
		out = SpecialInput[int64](seed, rank, count, op)
	case numeric.Float16:
		out = halfSpecialInput[numeric.Float16](seed, rank, count, op)
	case numeric.BFloat16:
		out = halfSpecialInput[numeric.BFloat16](seed, rank, count, op)
	}
	return out.([]T)
}

// specialChecker returns the check of a reduced result against the
// special reference of inputs: got must hold elements lo to hi.
func specialChecker[T allreduce.Numeric](inputs [][]T, op allreduce.ReduceOp) func(got []T, lo, hi int) error {
	var check any
	switch in := any(inputs).(type) {
	case [][]float32:
		check = arithChecker(in, op)
	case [][]float64:
		check = arithChecker(in, op)
	case [][]int32:
		check = arithChecker(in, op)
	case [][]int64:
		check = arithChecker(in, op)
	case [][]numeric.Float16:
		check = halfChecker(in, op)
	case [][]numeric.BFloat16:
		check = halfChecker(in, op)
	}
	return check.(func([]T, int, int) error)
}

func arithChecker[T numeric.Arith](inputs [][]T, op allreduce.ReduceOp) func([]T, int, int) error {
	ref := specialReference(inputs, op)
	return func(got []T, lo, hi int) error { return matchesReference(got, ref[lo:hi], op, lo) }
}

func halfChecker[H half](inputs [][]H, op allreduce.ReduceOp) func([]H, int, int) error {
	ref := halfReduce(inputs, op)
	return func(got []H, lo, hi int) error { return halfMatches(got, ref[lo:hi], op, len(inputs), lo) }
}
