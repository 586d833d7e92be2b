package allreduce

import (
	"context"
	"math"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Mesh all-reduce, the 2D mesh: two phases, no gather. With the
// vocabulary of hierarchy.go (N ranks on K nodes of L_k ranks, L the
// largest; M bytes):
//
//  1. agreement step on the group (agree.go);
//  2. intra-node AllReduce of the whole buffer (Auto on the node's
//     sub-group): every rank holds its node's result;
//  3. for each slot it holds, in increasing order, an inter-node
//     AllReduce of the whole buffer in inter-node group s: the L
//     inter-node groups run in parallel, each ending with the full
//     result, so no rank waits for a third phase. A rank of a node
//     smaller than the largest holds several slots and runs the later
//     all-reduces on a copy of its node's result (scratch), keeping the
//     first's result. Avg divides by N at the end, on every rank.
//
// Steps: 1 + 2(L_k-1) + 2(K-1) by the ring (⌈log2 L_k⌉(+2) + ⌈log2 K⌉(+2)
// by doubling), the ring's three phases less one (Torus's all-gather).
// Bytes sent per rank: 2(L_k-1)/L_k·M within the node and 2(K-1)/K·M to
// other nodes (times the slots it holds on a smaller node): L times
// Torus's inter-node bytes, paid for with one phase fewer, so it suits
// buffers whose time is latency, or nodes with a link per local rank.
//
// Exactness: the intra-node all-reduce ends identical on every rank of
// the node; every inter-node group has one member per node, numbered by
// node, with its node's result as input, and runs the same algorithm on
// the same count, so every group computes the same bits. Every rank ends
// bitwise identical, the same run to run; the division by N is the same
// on every rank.

func (g *Group) meshAllReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if err := g.agree(ctx, h); err != nil || c.count == 0 || g.size == 1 {
		return err
	}
	hy, err := g.hierarchy(ctx)
	if err != nil {
		return err
	}
	op := sumFor(c.op)
	if hy.intra != nil {
		all := call{kind: KindAllReduce, dt: c.dt, op: op, root: -1, count: c.count, buf: c.buf}
		if err := runPhase(ctx, "mesh: intra-node all-reduce", hy.intra, &all); err != nil {
			return err
		}
	}
	if hy.nodes() > 1 {
		slo, shi := hy.mySlots()
		var node, work []byte // this node's result, and a copy to reduce, for the slots after the first
		if shi-slo > 1 {
			s := g.scratchBytes(2 * len(c.buf))
			node, work = s[:len(c.buf)], s[len(c.buf):]
			g.localCopy(node, c.buf)
		}
		for s := slo; s < shi; s++ {
			buf := c.buf
			if s > slo {
				g.localCopy(work, node)
				buf = work
			}
			all := call{kind: KindAllReduce, dt: c.dt, op: op, root: -1, count: c.count, buf: buf}
			if err := runPhase(ctx, "mesh: inter-node all-reduce", hy.interGroup(g, s, hy.slots), &all); err != nil {
				return err
			}
		}
	}
	if c.op == Avg {
		g.divide(c.dt, c.buf, g.size)
	}
	return nil
}

// meshWork is the work (cost.Work) of a node of L ranks: its intra-node
// all-reduce and its L ranks' parts of the inter-node all-reduces of the
// whole buffer.
func meshWork(m cost.Model, s cost.Shape, b float64) float64 {
	return autoWork(m, s.IntraShape(), b) + float64(s.LocalSize)*autoWork(m.SharedBy(s.LocalSize), s.InterShape(), b)
}

// meshCost is the 2D mesh's predicted time: the agreement step, Auto's
// intra-node all-reduce of the whole buffer, then Auto's all-reduce of it
// among one rank per node (the L of them in parallel). On uneven nodes a
// rank of the smallest node holds up to ⌈L/L_min⌉ slots and runs that
// many inter-node all-reduces one after another (torusCost).
func meshCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	t := m.Agree(s)
	if b == 0 {
		return t
	}
	intra, slots := autoCost(m, s.IntraShape(), b), s.SlotsPerRank()
	if slots > 1 {
		intra = math.Max(intra, autoCost(m, s.SmallestShape(), b))
	}
	return t + intra + float64(slots)*autoCost(m.SharedBy(s.LocalSize), s.InterShape(), b)
}
