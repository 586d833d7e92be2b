package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Binomial trees over virtual ranks v = (r - root) mod N, so the root is
// v = 0. In round k (mask = 2^k) the ranks with v < mask that have a partner
// v + mask < N talk to it. Both run after the agreement step (agree.go).
//
// Broadcast: the data flows down the tree, ⌈log2 N⌉ rounds; the root sends
// up to ⌈log2 N⌉·M bytes, every other rank receives M once.
//
// Reduce: the data flows up the tree, each non-root rank sends its partial
// result (M bytes) to its parent once; children are combined in a fixed
// order, each child's operand after the parent's, so the root's result is
// the same run to run. Non-root buffers are left unchanged (partial
// results live in scratch).

// binomialBroadcastCost and binomialBroadcastWork are the binomial
// Broadcast's predicted time (cost.Binomial, agreement step included) and
// work (cost.BinomialWork); binomialReduceCost and binomialReduceWork the
// binomial Reduce's.
func binomialBroadcastCost(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.Binomial(m, s, b, false)
}

func binomialBroadcastWork(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.BinomialWork(m, s, b, false)
}

func binomialReduceCost(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.Binomial(m, s, b, true)
}

func binomialReduceWork(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.BinomialWork(m, s, b, true)
}

// treeBroadcast is the binomial Broadcast (above).
func (g *Group) treeBroadcast(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agree(ctx, h); err != nil || n == 1 || c.count == 0 {
		return err
	}
	v := mod(g.rank-c.root, n)
	real := func(v int) int { return mod(v+c.root, n) }
	mask := 1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			if err := g.recvCopy(ctx, h, 0, real(v-mask), c.buf); err != nil {
				return err
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			if err := g.send(ctx, h, 0, real(v+mask), c.buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// treeReduce is the binomial Reduce (above).
func (g *Group) treeReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agree(ctx, h); err != nil || n == 1 || c.count == 0 {
		return err
	}
	v := mod(g.rank-c.root, n)
	real := func(v int) int { return mod(v+c.root, n) }
	acc := c.buf // the partial result so far
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			return g.send(ctx, h, 0, real(v-mask), acc)
		}
		child := v | mask
		if child >= n {
			continue
		}
		out := acc
		if v != 0 && sameBytes(acc, c.buf) {
			out = g.scratchBytes(len(c.buf)) // leave a non-root's buffer as it was
		}
		if err := g.recvReduce(ctx, h, 0, real(child), acc, out, localFirst); err != nil {
			return err
		}
		acc = out
	}
	if c.op == Avg {
		g.divide(c.dt, c.buf, n)
	}
	return nil
}
