// Package reference is the sequential reference of the collectives that
// reduce: deterministic inputs and their element-wise reduction in rank
// order. It shares no code with the collectives, so results checked
// against it check the collectives. The test harness (allreducetest),
// cmd/bench and the cuda benchmark check with it; it does not import
// package testing, so commands may use it.
package reference

import (
	"math/rand/v2"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/numeric"
)

// Reduce is the sequential reference: the element-wise reduction of
// inputs[0], inputs[1], ... in rank order with op (Avg = Sum / N). It shares
// no code with the collectives.
func Reduce[T numeric.Arith](inputs [][]T, op allreduce.ReduceOp) []T {
	out := append([]T(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		for i, x := range in {
			switch op {
			case allreduce.Sum, allreduce.Avg:
				out[i] += x
			case allreduce.Prod:
				out[i] *= x
			case allreduce.Max:
				if x > out[i] {
					out[i] = x
				}
			case allreduce.Min:
				if x < out[i] {
					out[i] = x
				}
			}
		}
	}
	if op == allreduce.Avg {
		for i := range out {
			out[i] /= T(len(inputs))
		}
	}
	return out
}

// Input makes rank's deterministic input of n elements for op. Values are
// small integers (Prod: -1, 1 or 2, few 2s), so that every reduction order
// gives exactly the same result in floating point and comparisons with the
// reference can be bitwise.
func Input[T numeric.Arith](seed uint64, rank, n int, op allreduce.ReduceOp) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	out := make([]T, n)
	for i := range out {
		switch op {
		case allreduce.Prod:
			switch v := rng.IntN(16); {
			case v == 0:
				out[i] = 2
			case v < 4:
				out[i] = -1
			default:
				out[i] = 1
			}
		default:
			out[i] = T(rng.IntN(2001) - 1000)
		}
	}
	return out
}
