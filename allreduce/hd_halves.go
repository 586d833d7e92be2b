package allreduce

import (
	"context"
	"math/bits"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The halves of halving-doubling (hd.go) as a ReduceScatter and an
// AllGather of their own, the table's "hd" rows of those collectives
// (WithSchedule; Auto keeps the ring's): ChunkBounds layout (or the
// call's), rank r's chunk on rank r, with the masks P/2, ..., 1 so that
// active rank v's block is v's ranks' chunks: chunks 2v and 2v+1 for
// v < R, chunk v+R above.

// hdChunkBlocks is the block layout of the stand-alone halves: active rank
// v's block is the chunks (g.chunkBytes) of the ranks it stands for —
// 2v and 2v+1 below R, v+R above — so blocks are contiguous and in order.
func (g *Group) hdChunkBlocks(c *call, f hdFold) func(b int) (int, int) {
	return func(b int) (int, int) {
		first, last := b+f.rem, b+f.rem
		if b < f.rem {
			first, last = 2*b, 2*b+1
		}
		lo, _ := g.chunkBytes(c, first)
		_, hi := g.chunkBytes(c, last)
		return lo, hi
	}
}

// hdReduceScatter is a ReduceScatter (call semantics and layout of
// ringReduceScatter: c.src is read, rank r's chunk goes to c.buf) by
// recursive halving. After the agreement step: the fold (even rank r below
// 2R sends its whole src to r+1), log2 P halving steps over the blocks of
// hdChunkBlocks, then each odd rank below 2R sends its even partner that
// rank's chunk. Bytes sent per rank: (P-1)/P·M, plus M from the even ranks
// below 2R and M/N from the odd ones. Scratch: M bytes.
func (g *Group) hdReduceScatter(ctx context.Context, h transport.Header, c *call) error {
	n, r := g.size, g.rank
	lo, hi := g.chunkBytes(c, r)
	if err := g.checkLen("source", len(c.src), c.count*c.dt.Size()); err != nil {
		return err
	}
	if err := g.checkLen("destination (this rank's chunk)", len(c.buf), hi-lo); err != nil {
		return err
	}
	if n == 1 || c.count == 0 {
		g.localCopy(c.buf, c.src)
		return g.agree(ctx, h)
	}
	if err := g.agree(ctx, h); err != nil {
		return err
	}
	f := foldOf(n)
	steps := uint32(bits.TrailingZeros(uint(f.p2)))
	unfold := 1 + steps
	v := f.virtual(r)
	if v < 0 { // an even rank below 2R: contribute, then take my chunk
		if err := g.send(ctx, h, 0, r+1, c.src); err != nil {
			return err
		}
		return g.recvCopy(ctx, h, unfold, r+1, c.buf)
	}
	work := g.scratchBytes(len(c.src))
	src := c.src
	if r < 2*f.rem {
		if err := g.recvReduce(ctx, h, 0, r-1, c.src, work, receivedFirst); err != nil {
			return err
		}
		src = work
	}
	if _, err := g.hdReduceScatterSteps(ctx, h, 1, f, v, true, g.hdChunkBlocks(c, f), src, work); err != nil {
		return err
	}
	if c.op == Avg {
		blo, bhi := g.hdChunkBlocks(c, f)(v)
		g.divide(c.dt, work[blo:bhi], n)
	}
	g.localCopy(c.buf, work[lo:hi])
	if r < 2*f.rem {
		plo, phi := g.chunkBytes(c, r-1)
		return g.send(ctx, h, unfold, r-1, work[plo:phi])
	}
	return nil
}

// hdAllGather is an AllGather (call semantics and layout of ringAllGather:
// c.src is rank r's chunk of c.buf) by recursive doubling. After the
// agreement step: each even rank r below 2R sends its chunk to r+1, log2 P
// doubling steps over the blocks of hdChunkBlocks, then each odd rank
// below 2R sends r-1 the whole result. Bytes sent per rank: (P-1)/P·M
// (M the gathered size), plus M/N from the even ranks below 2R and M from
// the odd ones.
func (g *Group) hdAllGather(ctx context.Context, h transport.Header, c *call) error {
	n, r := g.size, g.rank
	lo, hi := g.chunkBytes(c, r)
	if err := g.checkLen("destination", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if err := g.checkLen("source (this rank's chunk)", len(c.src), hi-lo); err != nil {
		return err
	}
	if !sameBytes(c.buf[lo:hi], c.src) {
		g.localCopy(c.buf[lo:hi], c.src)
	}
	if n == 1 || c.count == 0 {
		return g.agree(ctx, h)
	}
	if err := g.agree(ctx, h); err != nil {
		return err
	}
	f := foldOf(n)
	steps := uint32(bits.TrailingZeros(uint(f.p2)))
	unfold := 1 + steps
	v := f.virtual(r)
	if v < 0 {
		if err := g.send(ctx, h, 0, r+1, c.buf[lo:hi]); err != nil {
			return err
		}
		return g.recvCopy(ctx, h, unfold, r+1, c.buf)
	}
	if r < 2*f.rem {
		plo, phi := g.chunkBytes(c, r-1)
		if err := g.recvCopy(ctx, h, 0, r-1, c.buf[plo:phi]); err != nil {
			return err
		}
	}
	if err := g.hdAllGatherSteps(ctx, h, 1, f, v, true, g.hdChunkBlocks(c, f), c.buf, nil); err != nil {
		return err
	}
	if r < 2*f.rem {
		return g.send(ctx, h, unfold, r-1, c.buf)
	}
	return nil
}

// hdReduceScatterCost is the halving ReduceScatter's predicted time: the
// agreement step, the fold (M bytes, reduced), log2 P halving steps
// moving and reducing M/2, ..., M/P with the masks P/2, ..., 1, and the
// unfold (each odd rank below 2R sends its partner's chunk, M/N)
// (pairStepsCost).
func hdReduceScatterCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 || b == 0 {
		return m.Agree(s)
	}
	return m.Agree(s) + pairStepsCost(m, s, pairFold{in: b, reduce: true, out: b / float64(n)}, hdHalvesSteps(n, b, true))
}

// hdAllGatherCost is the doubling AllGather's predicted time: the
// agreement step, the fold (each even rank below 2R sends its chunk,
// M/N), log2 P doubling steps moving M/P, ..., M/2 with the masks
// 1, ..., P/2, and the unfold (the whole M).
func hdAllGatherCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 || b == 0 {
		return m.Agree(s)
	}
	return m.Agree(s) + pairStepsCost(m, s, pairFold{in: b / float64(n), out: b}, hdHalvesSteps(n, b, false))
}

// hdReduceScatterWork and hdAllGatherWork are their work (cost.Work).
func hdReduceScatterWork(m cost.Model, s cost.Shape, b float64) float64 {
	return pairStepsWork(m, s, pairFold{in: b, reduce: true, out: b / float64(s.Ranks)}, hdHalvesSteps(s.Ranks, b, true))
}

func hdAllGatherWork(m cost.Model, s cost.Shape, b float64) float64 {
	return pairStepsWork(m, s, pairFold{in: b / float64(s.Ranks), out: b}, hdHalvesSteps(s.Ranks, b, false))
}

// hdHalvesSteps are the stand-alone halves' steps among the active ranks:
// halving (reduce) with masks P/2, ..., 1 over M/2, ..., M/P, or doubling
// with masks 1, ..., P/2 over M/P, ..., M/2.
func hdHalvesSteps(n int, b float64, reduce bool) []pairStep {
	p2 := floorPow2(n)
	steps := make([]pairStep, 0, bits.Len(uint(p2))-1)
	for i := 0; 1<<i < p2; i++ {
		if reduce {
			steps = append(steps, pairStep{mask: p2 >> (i + 1), bytes: b / float64(int(2)<<i), reduce: true})
		} else {
			steps = append(steps, pairStep{mask: 1 << i, bytes: b * float64(int(1)<<i) / float64(p2)})
		}
	}
	return steps
}
