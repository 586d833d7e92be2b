package allreduce

import (
	"context"
	"math"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Direct all-reduce, for ranks that can read one another's buffers
// (transport.PeerMemory: in process, the buffers themselves; over shm,
// copies in the ranks' shared files): every rank exposes its buffer, then
//
//   - two-shot (large buffers): rank r reduces chunk r over all N buffers in
//     rank order, in one fused pass, into its own buffer; barrier; rank r
//     copies every other chunk from its owner. Each rank reads M and writes
//     M/N, then reads and writes (N-1)/N·M: the same 2(N-1)/N·M moved
//     between ranks as the ring, in 3 synchronisation points instead of
//     2(N-1) steps and with one pass over memory instead of N-1.
//   - one-shot (small buffers): every rank reduces the whole buffer over all
//     N buffers into scratch; barrier; each copies scratch into its buffer.
//     Two synchronisation points: the latency floor.
//
// No rank writes memory another reads in the same phase: in two-shot, rank
// r writes only chunk r of its own buffer in phase 1, which only rank r
// reads; in phase 2 it writes the other chunks of its own buffer, which no
// one reads. The reduction order is rank 0, 1, ..., N-1 for every element.

// oneShotMaxBytes is the largest buffer reduced one-shot.
const oneShotMaxBytes = 32 << 10

// reduceBlockBytes is the block of the fused N-way reduction, small enough
// that a block's partial result stays in L1 while the N inputs stream by.
const reduceBlockBytes = 8 << 10

func (g *Group) directAllReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if c.count == 0 {
		return g.agree(ctx, h)
	}
	if g.size == 1 {
		return nil
	}
	pm, limit, _ := PeerMemoryOf(g.conn) // checked by NewGroup or Auto
	esize := c.dt.Size()
	seg := max(min(limit, len(c.buf))/esize, 1) * esize
	part := *c
	for off, step := 0, uint32(0); off < len(c.buf); off, step = off+seg, step+1 {
		part.buf = c.buf[off:min(off+seg, len(c.buf))]
		part.count = len(part.buf) / esize
		sh := h
		sh.Step = step // each segment's exposure its own header
		if err := g.directSegment(ctx, pm, sh, &part, off); err != nil {
			return err
		}
	}
	return nil
}

// directSegment is the direct all-reduce of c.buf, one exposure, which
// starts at byte off of the call's buffer (for c.finals).
func (g *Group) directSegment(ctx context.Context, pm transport.PeerMemory, h transport.Header, c *call, off int) error {
	views, err := pm.Expose(ctx, h, c.buf)
	if err != nil {
		return err
	}
	block := (reduceBlockBytes / c.dt.Size()) * c.dt.Size()
	if len(c.buf) <= oneShotMaxBytes {
		scratch := g.scratchBytes(len(c.buf) + block)
		out, tmp := scratch[:len(c.buf)], scratch[len(c.buf):]
		reduceViews(c, out, views, 0, tmp)
		if err := pm.Release(ctx); err != nil {
			return err
		}
		if c.op == Avg {
			divideBytes(c.dt, out, g.size)
		}
		copy(c.buf, out)
		c.finals.report(off, off+len(c.buf))
		return nil
	}
	// The reduced chunk goes into this rank's view, which peers read:
	// the caller's buffer itself in process, a copy of it where the
	// transport lends copies (shm).
	lo, hi := g.chunkBytes(c, g.rank)
	own := views[g.rank]
	reduceViews(c, own[lo:hi], views, lo, g.scratchBytes(block))
	if c.op == Avg {
		divideBytes(c.dt, own[lo:hi], g.size)
	}
	if err := pm.Arrive(ctx); err != nil {
		_ = pm.Release(ctx)
		return err
	}
	lent := &own[0] != &c.buf[0] // a copy (shm), not the buffer itself (in process)
	// This rank's chunk first: in process it is final already.
	for i := range views {
		q := (g.rank + i) % len(views)
		qlo, qhi := g.chunkBytes(c, q)
		if q != g.rank || lent {
			copy(c.buf[qlo:qhi], views[q][qlo:qhi])
		}
		c.finals.report(off+qlo, off+qhi)
	}
	return pm.Release(ctx)
}

// reduceViews sets out = views[0][off:] op views[1][off:] op ... in blocks
// of len(tmp) bytes accumulated in tmp, so out may alias one of the views.
// It needs at least two views.
func reduceViews(c *call, out []byte, views [][]byte, off int, tmp []byte) {
	block := len(tmp)
	for b := 0; b < len(out); b += block {
		e := min(b+block, len(out))
		acc := tmp[:e-b]
		combineBytes(c.dt, c.op, acc, views[0][off+b:off+e], views[1][off+b:off+e])
		for q := 2; q < len(views); q++ {
			combineBytes(c.dt, c.op, acc, acc, views[q][off+b:off+e])
		}
		copy(out[b:e], acc)
	}
}

// directCost is Direct's predicted time: three synchronisations, then
// each rank reduces its 1/N of the buffer from the N exposed ones and
// copies the other ranks' blocks: (N-1)/N·M bytes reduced and copied,
// the copies at the rate of the whole buffer's size regime (the chunks
// lie in N buffers of M bytes: that is the working set the caches see;
// priced by one chunk's size, Direct was predicted faster than the ring
// at sizes where it measured slower: docs/measurements.md).
//
// Where the ranks lend copies of at most LendLimit bytes (shm), the
// buffer goes in ⌈M/LendLimit⌉ segments of S bytes, and each segment
// costs its copy in (S·β), then one-shot one wait (Expose; Release does
// not wait), the whole segment reduced from the N copies, (N-1)·S bytes,
// and the result copied out; two-shot two waits (Expose, Arrive) and the
// in-place formula's reduction and copies.
func directCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 {
		return 0
	}
	if s.LendLimit > 0 {
		segs := max(math.Ceil(b/float64(s.LendLimit)), 1)
		seg := b / segs
		per := m.Intra.Transfer(seg)
		if seg <= oneShotMaxBytes {
			per += m.Intra.Alpha + float64(n-1)*seg*m.Gamma + m.Intra.Transfer(seg)
		} else {
			per += 2*m.Intra.Alpha + seg*float64(n-1)/float64(n)*m.Gamma + float64(n-1)*m.Intra.Transfer(seg/float64(n))
		}
		return segs * per
	}
	if b <= oneShotMaxBytes {
		// One-shot: every rank reduces the whole buffer from the N
		// views into scratch, (N-1)·M bytes, then copies it out; two
		// waits (Expose, Release).
		return 2*m.Intra.Alpha + float64(n-1)*b*m.Gamma + m.Intra.Transfer(b)
	}
	// The chunks a rank copies lie in N buffers of M bytes: their rate is
	// that of the whole buffer's regime (what the caches hold is the
	// working set, not one chunk).
	part := b * float64(n-1) / float64(n)
	return 3*m.Intra.Alpha + part*m.Gamma + part*m.Intra.Transfer(b)/b
}

// directWork is Direct's work (cost.Work): every rank does the copies and
// reductions directCost prices, side by side (one node: the ranks share
// memory).
func directWork(m cost.Model, s cost.Shape, b float64) float64 {
	return float64(s.Ranks) * directCost(m.WithoutLatency(), s, b)
}
