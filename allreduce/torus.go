package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Torus all-reduce, the 2D torus: every rank of a node carries a part of
// the buffer between nodes, all at once. With the vocabulary of
// hierarchy.go (N ranks on K nodes of L_k ranks, L the largest; M bytes),
// the buffer is cut, on several nodes, into B = min(8, ⌊M/4 MiB⌋) blocks,
// at least 1 (ChunkBounds(count, B, b); pipeline.go), and each block into
// L chunks (ChunkBounds(block, L, s)), chunk s going with slot s. Steps
// 2-4 run per block: over a transport that carries a host's messages and
// the others' on separate endpoints (package mixed) block b's step 3 runs
// while block b+1's step 2 and block b-1's step 4 do; elsewhere the
// blocks run one after the other. The steps and bytes below are per
// block (M its bytes):
//
//  1. agreement step on the group (agree.go);
//  2. intra-node ReduceScatter (the ring, ReduceScatterV's layout): each
//     rank gets its node's partial result of the chunks of the slots it
//     holds — one chunk on the largest nodes, a run of consecutive chunks
//     on smaller ones;
//  3. for each slot it holds, in increasing order, an inter-node
//     AllReduce of that chunk in inter-node group s (one holder of the
//     chunk per node): L_k of them run in parallel on node k, by
//     Auto on the sub-group; Avg divides the
//     rank's chunks by N here, once, on each holder;
//  4. intra-node AllGather (the ring) of every rank's chunks.
//
// Steps on even nodes (L_k = L): 1 + (L-1) + 2(K-1) (ring; ⌈log2 K⌉(+2)
// by doubling) + (L-1). Bytes sent per rank: (L-1)/L·M + 2(K-1)/K·M/L +
// (L-1)/L·M = 2(N-1)/N·M, the flat ring's total, of which only
// 2(K-1)/K·M/L crosses between nodes (2(K-1)/K·M per node, spread over
// its L ranks). On a node smaller than the largest, each rank holds
// about L/L_k chunks and sends about that many times more between nodes,
// in as many inter-node all-reduces one after another.
//
// Exactness: the ring's reduce-scatter reduces each chunk once, on its
// holder, in a fixed order; the inter-node all-reduce ends identical on
// every holder of the chunk; the all-gather copies. Every rank ends
// bitwise identical, the same run to run.

func (g *Group) torusAllReduce(ctx context.Context, h transport.Header, c *call) error {
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
	t := torusRun{g: g, hy: hy, c: c, op: sumFor(c.op), es: c.dt.Size(), blocks: blocks}
	return g.runBlocks(ctx, hy, blocks, stages{in: t.reduceScatter, across: t.interNode, out: t.allGather})
}

// torusRun is one Torus all-reduce: its buffer cut into blocks
// (pipeline.go), each block into L chunks by slot.
type torusRun struct {
	g      *Group
	hy     *hierarchy
	c      *call
	op     ReduceOp
	es     int // element size
	blocks int
}

// block is the element range of block b.
func (t *torusRun) block(b int) Chunk {
	lo, hi := ChunkBounds(t.c.count, t.blocks, b)
	return Chunk{lo, hi}
}

// chunkRange is the element range, within block b, of slots [a, e).
func (t *torusRun) chunkRange(b, a, e int) Chunk {
	n := t.block(b).Len()
	lo, _ := ChunkBounds(n, t.hy.slots, a)
	_, hi := ChunkBounds(n, t.hy.slots, e-1)
	return Chunk{lo, hi}
}

// layout is each local rank's chunks of block b, for the intra-node
// phases.
func (t *torusRun) layout(b int) []Chunk {
	out := make([]Chunk, t.hy.localSize())
	for l := range out {
		a, e := ChunkBounds(t.hy.slots, len(out), l)
		out[l] = t.chunkRange(b, a, e)
	}
	return out
}

// bytes is block b's bytes, and this rank's chunks of it.
func (t *torusRun) bytes(b int) (block, mine []byte) {
	bl := t.block(b)
	block = t.c.buf[bl.Lo*t.es : bl.Hi*t.es]
	a, e := t.hy.mySlots()
	m := t.chunkRange(b, a, e)
	return block, block[m.Lo*t.es : m.Hi*t.es]
}

// reduceScatter is step 2 on block b.
func (t *torusRun) reduceScatter(ctx context.Context, b int) error {
	if t.hy.intra == nil {
		return nil
	}
	block, mine := t.bytes(b)
	rs := call{kind: KindReduceScatter, dt: t.c.dt, op: t.op, root: -1, count: t.block(b).Len(),
		buf: mine, src: block, layout: t.layout(b)}
	return runPhase(ctx, "torus: intra-node reduce-scatter", t.hy.intra, &rs)
}

// interNode is step 3 on block b, and Avg's division of this rank's
// chunks.
func (t *torusRun) interNode(ctx context.Context, b int) error {
	block, mine := t.bytes(b)
	if t.hy.nodes() > 1 {
		slo, shi := t.hy.mySlots()
		for s := slo; s < shi; s++ {
			ch := t.chunkRange(b, s, s+1)
			if ch.Len() == 0 {
				continue // every holder sees the same empty chunk
			}
			all := call{kind: KindAllReduce, dt: t.c.dt, op: t.op, root: -1, count: ch.Len(), buf: block[ch.Lo*t.es : ch.Hi*t.es]}
			if err := runPhase(ctx, "torus: inter-node all-reduce", t.hy.interGroup(t.g, s, t.hy.slots), &all); err != nil {
				return err
			}
		}
	}
	if t.c.op == Avg {
		t.g.divide(t.c.dt, mine, t.g.size)
	}
	return nil
}

// allGather is step 4 on block b.
func (t *torusRun) allGather(ctx context.Context, b int) error {
	if t.hy.intra == nil {
		return nil
	}
	block, mine := t.bytes(b)
	ag := call{kind: KindAllGather, dt: t.c.dt, root: -1, count: t.block(b).Len(),
		buf: block, src: mine, layout: t.layout(b)}
	return runPhase(ctx, "torus: intra-node all-gather", t.hy.intra, &ag)
}

// torusWork is the work (cost.Work) of a node of L ranks: its ring
// reduce-scatter and all-gather, and its L ranks' parts of the inter-node
// all-reduces of M/L bytes.
func torusWork(m cost.Model, s cost.Shape, b float64) float64 {
	l := s.LocalSize
	c := b / float64(l)
	return ringWork(m, s.IntraShape(), b) + float64(l)*autoWork(m.SharedBy(l), s.InterShape(), c)
}

// torusCost is the 2D torus's predicted time: the agreement step, then
// per block (compositionCost: B blocks of M/B bytes, overlapped over the
// mixed transport) the intra-node ring reduce-scatter ((L-1) steps of
// M/L bytes of the block), Auto's all-reduce of M/L bytes among one rank
// per node, and the intra-node ring all-gather. On uneven nodes a rank
// of the smallest node, L_min ranks, holds up to s = ⌈L/L_min⌉ slots:
// its ring moves up to s·M/L bytes a step (the lock-step ring waits for
// the largest chunk in flight) in L_min-1 steps (the later of that and
// the largest node's ring), and it runs s inter-node all-reduces one
// after another, which the other nodes' holders of those slots wait for.
func torusCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	if b == 0 {
		return m.Agree(s)
	}
	// Half the intra-node ring on a node of n ranks, each holding x
	// bytes of chunks: n-1 reduce-scatter (reduce) or all-gather steps,
	// each as its lock-step pieces.
	half := func(n int, x float64, reduce bool) float64 {
		k := m.Pieces(x)
		t := k * m.Intra.Time(x/k)
		if reduce {
			t += x * m.Gamma
		}
		return float64(n-1) * t
	}
	slots := s.SlotsPerRank()
	return compositionCost(m, s, b, func(x float64) (in, across, out float64) {
		c := x / float64(s.LocalSize)
		in, out = half(s.LocalSize, c, true), half(s.LocalSize, c, false)
		if slots > 1 { // the slower of the two nodes' rings, as a whole
			sin, sout := half(s.SmallestNode, float64(slots)*c, true), half(s.SmallestNode, float64(slots)*c, false)
			if sin+sout > in+out {
				in, out = sin, sout
			}
		}
		return in, float64(slots) * autoCost(m.SharedBy(s.LocalSize), s.InterShape(), c), out
	})
}
