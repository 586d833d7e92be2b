package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Hierarchical all-reduce, the 2D ring: only one rank per node talks to
// other nodes. With the vocabulary of hierarchy.go (N ranks on K nodes of
// L_k ranks, L the largest; M bytes; on several nodes the buffer is cut
// into B = min(8, ⌊M/4 MiB⌋) blocks, at least 1, pipeline.go):
//
//  1. agreement step on the group (agree.go);
//  2. per block, intra-node Reduce to the node's local rank 0 (its local
//     root) — the binomial tree, or the pipelined chain for large blocks;
//  3. per block, inter-node AllReduce among the K local roots
//     (inter-node group 0), by Auto on the sub-group; Avg divides the
//     result by N here, once, on each root;
//  4. per block, intra-node Broadcast from the local root.
//
// Over a transport that carries a host's messages and the others' on
// separate endpoints (package mixed), block b's step 3 runs while block
// b+1's step 2 and block b-1's step 4 do (pipeline.go); elsewhere the
// blocks run one after the other. The steps below are per block.
//
// Steps: 1 + (1 + ⌈log2 L⌉) + 2(K-1) (ring; ⌈log2 K⌉(+2) doubling)
// + (1 + ⌈log2 L⌉) for the binomial trees, the chains' S+L-2 rounds of S
// segments instead for large buffers. Bytes sent per rank within its
// node: M for the reduce from every rank but the local root, and M per
// child for the broadcast (the binomial tree's root ⌈log2 L_k⌉·M; in the
// chain every rank but the last sends M once). Between nodes only the
// local roots send: 2(K-1)/K·M each by the ring (⌈log2 K⌉·M by
// doubling), so 2(K-1)/K·M per node crosses between nodes — the fewest
// any all-reduce can — against the flat ring's 2(N-1)/N·M from every
// rank; but the whole buffer passes through one rank per node (Torus
// spreads it over all of them). Blocks change no total: the ring of each
// block sends 2(K-1)/K of the block (to within a chunk's rounding).
//
// Exactness: the local root's Reduce combines its node's inputs in a
// fixed order; the inter-node AllReduce ends identical on every root;
// the Broadcast copies it. Every rank ends bitwise identical, the same
// run to run.

func (g *Group) hierarchicalAllReduce(ctx context.Context, h transport.Header, c *call) error {
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
	blocks := g.pipelineBlocks(hy, len(c.buf))
	op, es := sumFor(c.op), c.dt.Size()
	block := func(b int) (int, []byte) {
		lo, hi := ChunkBounds(c.count, blocks, b)
		return hi - lo, c.buf[lo*es : hi*es]
	}
	return g.runBlocks(ctx, hy, blocks, stages{
		in: func(ctx context.Context, b int) error {
			if hy.intra == nil {
				return nil
			}
			n, buf := block(b)
			reduce := call{kind: KindReduce, dt: c.dt, op: op, root: 0, count: n, buf: buf}
			return runPhase(ctx, "hierarchical: intra-node reduce", hy.intra, &reduce)
		},
		across: func(ctx context.Context, b int) error {
			if hy.local != 0 {
				return nil
			}
			n, buf := block(b)
			if hy.nodes() > 1 {
				all := call{kind: KindAllReduce, dt: c.dt, op: op, root: -1, count: n, buf: buf}
				if err := runPhase(ctx, "hierarchical: inter-node all-reduce", hy.interGroup(g, 0, 1), &all); err != nil {
					return err
				}
			}
			if c.op == Avg {
				g.divide(c.dt, buf, g.size)
			}
			return nil
		},
		out: func(ctx context.Context, b int) error {
			if hy.intra == nil {
				return nil
			}
			n, buf := block(b)
			bcast := call{kind: KindBroadcast, dt: c.dt, root: 0, count: n, buf: buf}
			return runPhase(ctx, "hierarchical: intra-node broadcast", hy.intra, &bcast)
		},
	})
}

// hierarchicalCost is the 2D ring's predicted time: the agreement step,
// then per block (compositionCost: B blocks of M/B bytes, overlapped
// over the mixed transport) the intra-node Reduce, Auto's all-reduce
// among the K local roots over the inter-node link, and the intra-node
// Broadcast.
func hierarchicalCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	if b == 0 {
		return m.Agree(s)
	}
	// The Broadcast's agreement step is off the critical path: the other
	// ranks of the node sent theirs long before the local root, back from
	// the inter-node phase, sends its own with the data right behind it.
	intra, inter := s.IntraShape(), s.InterShape()
	return compositionCost(m, s, b, func(x float64) (in, across, out float64) {
		return bestCost(m, intra, KindReduce, x), autoCost(m, inter, x), bestCost(m, intra, KindBroadcast, x) - m.Agree(intra)
	})
}

// hierarchicalWork is the work (cost.Work) of a node of L ranks: its
// Reduce and Broadcast, and its rank's part of the inter-node all-reduce.
func hierarchicalWork(m cost.Model, s cost.Shape, b float64) float64 {
	intra := s.IntraShape()
	return bestWork(m, intra, KindReduce, b) + autoWork(m, s.InterShape(), b) + bestWork(m, intra, KindBroadcast, b)
}

// autoCost is the predicted time of Auto's choice for b bytes on shape s,
// as a sub-group of a composition runs it (chosen at the lower end of
// b's size class, as a group does).
func autoCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks <= 1 {
		return 0
	}
	sp, _ := Choose(m, s, classBytes(sizeClass(int(b)))).spec()
	return sp.predict(m, s, b)
}

// autoWork is the work (cost.Work) of the busiest node in Auto's choice
// for b bytes on shape s, as autoCost prices it.
func autoWork(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks <= 1 {
		return 0
	}
	sp, _ := Choose(m, s, classBytes(sizeClass(int(b)))).spec()
	return sp.work(m, s, b)
}
