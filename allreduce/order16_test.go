package allreduce_test

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// The 16-bit reductions round at every step, so their result depends on
// the order in which an algorithm combines the ranks' values. These tests
// give inputs whose steps do round and check, for every algorithm and the
// other reducing collectives, that every rank holds the same bits and that
// each element is what some order gives: op applied along some binary tree
// over the ranks' values (either operand first), rounded once per step
// (Avg: that sum, then divided and rounded once). Direct combines in rank
// order, and its result is checked to be exactly that.

// reachable is every value the reduction of vals (one per rank) can take
// over all binary trees and operand orders, one rounding per step.
func reachable(c halfCodec, op allreduce.ReduceOp, vals []uint16) []uint16 {
	n := len(vals)
	stepOp := op
	if op == allreduce.Avg {
		stepOp = allreduce.Sum
	}
	sets := make([][]uint16, 1<<n)
	for r, v := range vals {
		sets[1<<r] = []uint16{v}
	}
	for s := 3; s < 1<<n; s++ {
		if bits.OnesCount(uint(s)) < 2 {
			continue
		}
		var set []uint16
		for a := (s - 1) & s; a > 0; a = (a - 1) & s {
			for _, x := range sets[a] {
				for _, y := range sets[s&^a] {
					if z := c.want(stepOp, x, y); !slices.Contains(set, z) {
						set = append(set, z)
					}
				}
			}
		}
		sets[s] = set
	}
	out := sets[1<<n-1]
	if op == allreduce.Avg {
		for i, x := range out {
			out[i] = c.avg(x, n)
		}
	}
	return out
}

// avg is Avg's final step: sum divided by n, rounded once.
func (c halfCodec) avg(sum uint16, n int) uint16 {
	if f := c.toF32(sum) / float32(n); f == f {
		return c.fromF32(f)
	}
	return c.nan
}

// inRankOrder is the reduction of vals in rank order, one rounding per
// step: Direct's order.
func inRankOrder(c halfCodec, op allreduce.ReduceOp, vals []uint16) uint16 {
	stepOp := op
	if op == allreduce.Avg {
		stepOp = allreduce.Sum
	}
	acc := vals[0]
	for _, v := range vals[1:] {
		acc = c.want(stepOp, acc, v)
	}
	if op == allreduce.Avg {
		acc = c.avg(acc, len(vals))
	}
	return acc
}

// roundingInput is rank r's count values for op: for Sum and Avg values
// of both signs within a few binades of 1 with random mantissas (so sums
// round), for Prod values in [1/2, 2) (so products round), for Max and Min
// any finite values; about one in twelve is one of c's specials.
func roundingInput(c halfCodec, op allreduce.ReduceOp, seed uint64, r, count int) []uint16 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	out := make([]uint16, count)
	for i := range out {
		if rng.IntN(12) == 0 {
			out[i] = c.specials[rng.IntN(len(c.specials))]
			continue
		}
		e := c.bias - 3 + rng.IntN(7)
		if op == allreduce.Prod {
			e = c.bias - 1 + rng.IntN(2)
		}
		out[i] = uint16(rng.IntN(2)<<15 | e<<c.mant | rng.IntN(1<<c.mant))
	}
	return out
}

var reduceOps = []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Prod, allreduce.Max, allreduce.Min}

// checkOrder16 checks every rank's result of element lo+i against the
// values some order gives (and, exact, the rank order's): got[r] holds
// elements lo to lo+len(got[r]) on rank r; same requires every rank to
// hold the same bits.
func checkOrder16(t *testing.T, what string, c halfCodec, op allreduce.ReduceOp, inputs, got [][]uint16, lo []int, same, rankOrder bool) {
	t.Helper()
	n := len(inputs)
	vals := make([]uint16, n)
	for r := range got {
		if same && !slices.Equal(got[r], got[0]) {
			t.Errorf("%s %v %v: rank %d's result %x differs from rank 0's %x", what, c.dt, op, r, got[r], got[0])
			return
		}
		for i, x := range got[r] {
			for q := range inputs {
				vals[q] = inputs[q][lo[r]+i]
			}
			if rankOrder {
				if w := inRankOrder(c, op, vals); x != w {
					t.Errorf("%s %v %v of %x: rank %d, element %d is %#04x, the rank order's %#04x", what, c.dt, op, vals, r, lo[r]+i, x, w)
					return
				}
			} else if set := reachable(c, op, vals); !slices.Contains(set, x) {
				t.Errorf("%s %v %v of %x: rank %d, element %d is %#04x, no order's (%x)", what, c.dt, op, vals, r, lo[r]+i, x, set)
				return
			}
		}
	}
}

// TestRoundingOrder16 runs every AllReduce algorithm on 3, 4 and 5 ranks
// (nodes of 2), and ReduceScatter and Reduce, on rounding inputs of 37
// elements (not a multiple of any rank count), for each 16-bit type and op.
func TestRoundingOrder16(t *testing.T) {
	const count = 37
	for n := 3; n <= 5; n++ {
		conns, _, err := allreducetest.InprocConns(n, 20e9)
		if err != nil {
			t.Fatal(err)
		}
		algos := allreducetest.AlgorithmsFor(conns[0])
		for _, c := range conns {
			_ = c.Close()
		}
		for _, c := range halfCodecs {
			for k, op := range reduceOps {
				inputs := make([][]uint16, n)
				for r := range inputs {
					inputs[r] = roundingInput(c, op, uint64(100*n+k), r, count)
				}
				zero := make([]int, n)
				for _, algo := range algos {
					got := runCollective16(t, n, c.dt, inputs, func(ctx context.Context, g *allreduce.Group, buf []uint16) error {
						return allReduce16(ctx, g, c.dt, buf, op)
					}, allreduce.WithAlgorithm(algo))
					checkOrder16(t, "AllReduce/"+algo.String(), c, op, inputs, got, zero, true, algo == allreduce.Direct)
				}
				root := k % n
				got := runCollective16(t, n, c.dt, inputs, func(ctx context.Context, g *allreduce.Group, buf []uint16) error {
					return reduce16(ctx, g, c.dt, buf, op, root)
				})
				checkOrder16(t, "Reduce", c, op, inputs, got[root:root+1], zero, false, false)
				los := make([]int, n)
				got = runCollective16(t, n, c.dt, inputs, func(ctx context.Context, g *allreduce.Group, buf []uint16) error {
					lo, hi := allreduce.ChunkBounds(count, n, g.Rank())
					los[g.Rank()] = lo
					dst := make([]uint16, hi-lo)
					err := reduceScatter16(ctx, g, c.dt, dst, buf, op)
					copy(buf, dst)
					return err
				})
				for r := range got {
					lo, hi := allreduce.ChunkBounds(count, n, r)
					got[r] = got[r][:hi-lo]
				}
				checkOrder16(t, "ReduceScatter", c, op, inputs, got, los, false, false)
			}
		}
	}
}
