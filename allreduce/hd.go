package allreduce

import (
	"context"
	"math/bits"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Halving-doubling AllReduce (HalvingDoubling, "hd"), Rabenseifner's
// algorithm: a recursive-halving reduce-scatter, then a recursive-doubling
// all-gather. Bandwidth-optimal like the ring, in 2·log2 N steps instead of
// 2(N-1).
//
// Fold. With P the largest power of two ≤ N and R = N-P, the ranks below
// 2R pair up as in doubling.go: even rank r sends its whole buffer to r+1
// (which reduces it, r's operand first) and sits out; the P remaining
// ("active") ranks are renumbered v = 0..P-1 (v = r/2 below 2R, r-R
// above; hdFold). At the end every odd rank below 2R sends the result back
// to r-1.
//
// Reduce-scatter (hdReduceScatterSteps): the buffer is P blocks in order.
// Each active rank starts with all of them; at step i it and its partner
// v XOR m_i split their common range of blocks in two, each keeps one
// half — the lower for the rank whose bit m_i is clear — sends the other
// and reduces the partner's copy of the half it keeps. After log2 P steps
// each active rank holds one block reduced over all ranks: block v when
// the masks run m = P/2, P/4, ..., 1 (highFirst), block bitrev(v) when
// they run 1, 2, ..., P/2. Bytes sent per rank: (P-1)/P of the buffer.
//
// All-gather (hdAllGatherSteps): the same exchanges in reverse order, each
// rank sending the range it holds and copying its partner's, until every
// active rank holds every block. Bytes sent per rank: (P-1)/P of the
// buffer.
//
// AllReduce runs the masks 1, 2, ..., P/2 (so that every rank's first
// message, the fold's or the first halving's, goes to a ring neighbour
// r±1, where a rank that called another collective sends: a mismatch is
// found without the agreement step, as in doubling.go) over P equal blocks
// (ChunkBounds(count, P, b)). Steps and bytes for a buffer of M bytes on N
// ranks: 2·log2 P steps, plus 2 when N is not a power of two; every active
// rank sends 2(P-1)/P·M bytes, plus M for the odd ranks below 2R (the
// even ones send M, once).
//
// Exactness: each block is reduced once, by the rank that ends up holding
// it, and copied from there unchanged; every combination takes the lower
// rank's operand first. So every rank ends bitwise identical whatever the
// values, and the same run to run. Avg divides each block by N once, on
// its holder, before the all-gather.
//
// The two halves are also a ReduceScatter and an AllGather of their own
// (hd_halves.go).

// hdMask is the partner mask of halving step i (0-based) over p2 ranks.
func hdMask(p2, i int, highFirst bool) int {
	if highFirst {
		return p2 >> (i + 1)
	}
	return 1 << i
}

// hdRange is the range of blocks [lo, lo+size) active rank v holds before
// halving step i (and after all-gather step i).
func hdRange(v, p2, i int, highFirst bool) (lo, size int) {
	size = p2
	for s := 0; s < i; s++ {
		size /= 2
		if v&hdMask(p2, s, highFirst) != 0 {
			lo += size
		}
	}
	return lo, size
}

// hdSpan is the bytes of blocks [lo, hi) under the block layout blocks.
func hdSpan(blocks func(b int) (lo, hi int), lo, hi int) (int, int) {
	a, _ := blocks(lo)
	_, b := blocks(hi - 1)
	return a, b
}

// hdReduceScatterSteps is the recursive-halving reduce-scatter among the
// active ranks of f, this rank being active rank v: blocks (contiguous, in
// order) is the byte range of each of the P blocks; src is this rank's
// operand and work receives the partial results (work may be src, for an
// in-place reduce-scatter; otherwise src is only read). Step numbers are
// step, step+1, ... (log2 P of them). It returns the block this rank ends
// with, whose bytes in work then hold the reduction over every active rank.
func (g *Group) hdReduceScatterSteps(ctx context.Context, h transport.Header, step uint32, f hdFold, v int, highFirst bool,
	blocks func(b int) (lo, hi int), src, work []byte) (int, error) {
	steps := bits.TrailingZeros(uint(f.p2))
	cur := src
	for i := 0; i < steps; i++ {
		m := hdMask(f.p2, i, highFirst)
		lo, size := hdRange(v, f.p2, i, highFirst)
		half := size / 2
		keep, give := lo, lo+half
		if v&m != 0 {
			keep, give = give, keep
		}
		klo, khi := hdSpan(blocks, keep, keep+half)
		glo, ghi := hdSpan(blocks, give, give+half)
		partner := v ^ m
		order := localFirst // the lower rank's operand first
		if partner < v {
			order = receivedFirst
		}
		peer := f.real(partner)
		if err := g.sendRecvReduce(ctx, h, step+uint32(i), peer, cur[glo:ghi], peer, cur[klo:khi], work[klo:khi], order); err != nil {
			return 0, err
		}
		cur = work
	}
	own, _ := hdRange(v, f.p2, steps, highFirst)
	return own, nil
}

// hdAllGatherSteps is the recursive-doubling all-gather among the active
// ranks of f, the mirror of hdReduceScatterSteps with the same masks: on
// entry this rank's block of buf (the one hdReduceScatterSteps ended with)
// is its contribution, on return buf holds every block. Each half copied
// in is reported final to fin (nil: nobody asked). Step numbers are
// step, step+1, ... (log2 P of them).
func (g *Group) hdAllGatherSteps(ctx context.Context, h transport.Header, step uint32, f hdFold, v int, highFirst bool,
	blocks func(b int) (lo, hi int), buf []byte, fin *finals) error {
	steps := bits.TrailingZeros(uint(f.p2))
	for s := 0; s < steps; s++ {
		i := steps - 1 - s // undo halving step i
		m := hdMask(f.p2, i, highFirst)
		lo, size := hdRange(v, f.p2, i, highFirst)
		half := size / 2
		mine, theirs := lo, lo+half
		if v&m != 0 {
			mine, theirs = theirs, mine
		}
		mlo, mhi := hdSpan(blocks, mine, mine+half)
		tlo, thi := hdSpan(blocks, theirs, theirs+half)
		peer := f.real(v ^ m)
		if err := g.sendRecvCopy(ctx, h, step+uint32(s), peer, buf[mlo:mhi], peer, buf[tlo:thi]); err != nil {
			return err
		}
		fin.report(tlo, thi)
	}
	return nil
}

// hdAllReduce is HalvingDoubling.
func (g *Group) hdAllReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if c.count == 0 {
		return g.agree(ctx, h)
	}
	n, r := g.size, g.rank
	if n == 1 {
		return nil
	}
	f := foldOf(n)
	steps := uint32(bits.TrailingZeros(uint(f.p2)))
	buf, es := c.buf, c.dt.Size()
	if r < 2*f.rem { // fold
		if r%2 == 0 {
			if err := g.send(ctx, h, 0, r+1, buf); err != nil {
				return err
			}
		} else if err := g.recvReduce(ctx, h, 0, r-1, buf, buf, receivedFirst); err != nil {
			return err
		}
	}
	if v := f.virtual(r); v >= 0 {
		blocks := func(b int) (int, int) {
			lo, hi := ChunkBounds(c.count, f.p2, b)
			return lo * es, hi * es
		}
		own, err := g.hdReduceScatterSteps(ctx, h, 1, f, v, false, blocks, buf, buf)
		if err != nil {
			return err
		}
		lo, hi := blocks(own)
		if c.op == Avg {
			g.divide(c.dt, buf[lo:hi], n)
		}
		c.finals.report(lo, hi)
		if err := g.hdAllGatherSteps(ctx, h, 1+steps, f, v, false, blocks, buf, c.finals); err != nil {
			return err
		}
	}
	if r < 2*f.rem { // unfold
		if r%2 == 1 {
			return g.send(ctx, h, 1+2*steps, r-1, buf)
		}
		return g.recvCopy(ctx, h, 1+2*steps, r+1, buf)
	}
	return nil
}

// hdCost is halving-doubling's predicted time: log2 P reduce-scatter
// steps moving and reducing M/2, M/4, ..., M/P, the all-gather's log2 P
// steps moving the same sizes back, each α + x·β (+ x·γ) over the link
// between the partners, with the fold and unfold of doubling.go when N is
// not a power of two (pairStepsCost).
func hdCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	switch {
	case n == 1:
		return 0
	case b == 0:
		return m.Agree(s)
	}
	return pairStepsCost(m, s, pairFold{in: b, reduce: true, out: b}, hdSteps(n, b))
}

// hdSteps are halving-doubling's steps among the active ranks: the
// reduce-scatter's halves, reduced, then the all-gather's in reverse.
func hdSteps(n int, b float64) []pairStep {
	var rs, ag []pairStep
	part := b
	for mask := 1; mask < floorPow2(n); mask <<= 1 {
		part /= 2
		rs = append(rs, pairStep{mask: mask, bytes: part, reduce: true})
		ag = append([]pairStep{{mask: mask, bytes: part}}, ag...)
	}
	return append(rs, ag...)
}

// hdWork is halving-doubling's work (cost.Work).
func hdWork(m cost.Model, s cost.Shape, b float64) float64 {
	return pairStepsWork(m, s, pairFold{in: b, reduce: true, out: b}, hdSteps(s.Ranks, b))
}
