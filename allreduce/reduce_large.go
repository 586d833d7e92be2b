package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Reduce of large buffers: a pipelined chain, the mirror of the broadcast
// chain (bcast_large.go).
//
// With v = (r - root) mod N and w = N-1-v (the distance from the chain's
// tail), rank v receives segment k's partial result from v+1 in round
// k+w-1, combines it with its own segment (its own operand first) and
// sends the result to v-1 in round k+w, while it receives segment k+1.
// The tail sends its own segments; the root reduces into its buffer in
// place. So the root's result is x_root op (x_root+1 op (... op x_root-1)),
// computed once, the same run to run; Avg divides it by N once, at the
// root. Other ranks' buffers are left unchanged: their partial results
// live in two segment-sized scratch buffers, one being sent while the next
// is reduced into the other.
//
// Steps and bytes for a buffer of M bytes on N ranks in S segments (of at
// most chainMaxSegmentBytes; chainSegments): the agreement step, then S+N-2
// rounds on the tail's path to the root; every rank but the root sends M
// and every rank but the tail receives and reduces M. The binomial tree
// (tree.go) sends the same M per rank, but its root receives and reduces
// ⌈log2 N⌉·M, one child after another; the chain spreads the reductions
// over every rank, all at the same time.
//
// A round's step number is the round, as in the broadcast chain.

// chainReduceCost and chainReduceWork are the chain Reduce's predicted
// time and work, as chainBroadcastCost's, each received segment reduced.
func chainReduceCost(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.Chain(m, s, b, chainSegmentsFor(s.Ranks, b), true)
}

func chainReduceWork(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.ChainWork(m, s, b, chainSegmentsFor(s.Ranks, b), true)
}

// chainReduce is the pipelined chain Reduce (above).
func (g *Group) chainReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agreeAt(ctx, h, agreeChainStep); err != nil || n == 1 || c.count == 0 {
		return err
	}
	es := c.dt.Size()
	segs := g.chainSegments(c.count, es)
	bounds := func(k int) (int, int) {
		lo, hi := ChunkBounds(c.count, segs, k)
		return lo * es, hi * es
	}
	v := mod(g.rank-c.root, n)
	w := n - 1 - v
	next, prev := mod(g.rank-1, n), mod(g.rank+1, n) // towards the root, from the tail
	// partial returns where segment k's partial result lives on this rank:
	// the root's buffer, the tail's own input, else one of two scratch
	// buffers.
	var scratch [2][]byte
	if v != 0 && w != 0 {
		lo, hi := bounds(0) // the largest segment
		s := g.scratchBytes(2 * (hi - lo))
		scratch[0], scratch[1] = s[:hi-lo], s[hi-lo:]
	}
	partial := func(k int) []byte {
		lo, hi := bounds(k)
		if v == 0 || w == 0 {
			return c.buf[lo:hi]
		}
		return scratch[k%2][:hi-lo]
	}
	for round := max(w-1, 0); round < segs+w; round++ {
		step := uint32(round)
		k := round - w // segment to send; k+1 is the one to receive
		sending := v > 0 && k >= 0
		receiving := w > 0 && k+1 < segs
		var local []byte
		if receiving {
			lo, hi := bounds(k + 1)
			local = c.buf[lo:hi]
		}
		var err error
		switch {
		case sending && receiving:
			err = g.sendRecvReduce(ctx, h, step, next, partial(k), prev, local, partial(k+1), localFirst)
		case sending:
			err = g.send(ctx, h, step, next, partial(k))
		case receiving:
			err = g.recvReduce(ctx, h, step, prev, local, partial(k+1), localFirst)
		}
		if err != nil {
			return err
		}
	}
	if c.op == Avg && v == 0 {
		g.divide(c.dt, c.buf, n)
	}
	return nil
}
