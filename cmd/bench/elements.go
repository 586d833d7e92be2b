package main

import (
	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/run/reference"
	"github.com/ringddp/ringddp/numeric"
)

// The element types' inputs, sequential reference and poison. The types
// with Go arithmetic take package reference's; the 16-bit floating-point
// types (-dtype float16, bfloat16), whose reductions round at every step,
// take inputs on which every order of steps gives the same bits: small
// integers (|x| ≤ 3, and 0 on ranks 64 and above, so every partial sum is
// an integer of magnitude at most 192, exact in both types; Prod's ±1 and
// 2, whose partial products are powers of two, exact until they reach
// Inf whatever the order). Their reference reduces the widened inputs in
// float32 (exactly so; Avg's division rounds in float32 as the collective's
// last step does) and rounds the result once.

// halfRanks is how many ranks hold nonzero 16-bit inputs.
const halfRanks = 64

// inputOf is rank's deterministic input of n elements for op.
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
		h := make([]numeric.Float16, n)
		numeric.EncodeFloat16(h, halfInput(seed, rank, n, op))
		out = h
	case numeric.BFloat16:
		h := make([]numeric.BFloat16, n)
		numeric.EncodeBFloat16(h, halfInput(seed, rank, n, op))
		out = h
	}
	return out.([]T)
}

// halfInput is a 16-bit type's input as float32 values (see above).
func halfInput(seed uint64, rank, n int, op allreduce.ReduceOp) []float32 {
	x := reference.Input[float32](seed, rank, n, op)
	if op == allreduce.Prod {
		return x
	}
	for i := range x {
		x[i] = float32(int(x[i]) % 4)
		if rank >= halfRanks {
			x[i] = 0
		}
	}
	return x
}

// reduceOf is the sequential reference of inputs with op.
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
		r := reference.Reduce(widened(in, numeric.DecodeFloat16), op)
		h := make([]numeric.Float16, len(r))
		numeric.EncodeFloat16(h, r)
		out = h
	case [][]numeric.BFloat16:
		r := reference.Reduce(widened(in, numeric.DecodeBFloat16), op)
		h := make([]numeric.BFloat16, len(r))
		numeric.EncodeBFloat16(h, r)
		out = h
	}
	return out.([]T)
}

// widened is every input as float32.
func widened[H numeric.Float16 | numeric.BFloat16](inputs [][]H, decode func([]float32, []H)) [][]float32 {
	out := make([][]float32, len(inputs))
	for r, in := range inputs {
		out[r] = make([]float32, len(in))
		decode(out[r], in)
	}
	return out
}

// poisonOf is the value that fills output-only buffers before the checked
// iteration, so that an element the collective failed to write is counted
// wrong: one that no input or reference result of a realistic rank count
// equals, 16777213 (small integers' sums, ±1 and 2's products never reach
// it, and it is exact in every 32- and 64-bit type), and for the 16-bit
// types a NaN with a payload (the inputs hold no NaN).
func poisonOf[T allreduce.Numeric]() T {
	var v T
	switch p := any(&v).(type) {
	case *float32:
		*p = 16777213
	case *float64:
		*p = 16777213
	case *int32:
		*p = 16777213
	case *int64:
		*p = 16777213
	case *numeric.Float16:
		*p = 0x7d5a
	case *numeric.BFloat16:
		*p = 0x7f9a
	}
	return v
}
