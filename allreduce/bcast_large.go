package allreduce

import (
	"context"
	"math"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Broadcast of large buffers: a pipelined chain.
//
// The binomial tree (tree.go) sends the whole buffer ⌈log2 N⌉ times from
// the root's side, one round after another. The chain passes it along the
// ring instead, in segments: with v = (r - root) mod N, rank v receives
// segment k from v-1 in round k+v-1 and sends it to v+1 in round k+v, so
// a rank forwards segment k while it receives k+1, and every link carries
// the buffer once, all links at the same time.
//
// Steps and bytes for a buffer of M bytes on N ranks in S segments (of at
// most chainMaxSegmentBytes; chainSegments): the agreement step, then S+N-2
// rounds on the last rank's path; every rank but the last sends M, every
// rank but the root receives M. The binomial tree's root sends ⌈log2 N⌉·M
// and its critical path is ⌈log2 N⌉ whole-buffer transfers; the chain's is
// one transfer plus N-2 segments.
//
// A round's step number is the round: both halves of a rank's exchange
// (send segment k, receive segment k+1) carry it, and the rounds of one
// link are in order, so a message of another round is a mismatch.

// The chains' segment size. A chain of N ranks moving M bytes in S
// segments takes (S+N-2)(α + β·M/S) for per-message cost α and per-byte
// cost β, least at S = sqrt((N-2)·M·β/α): chainSegments takes that S, with
// α/β = chainLatencyBytes, and keeps segments between chainMinSegmentBytes
// and chainMaxSegmentBytes. The binomial tree takes ⌈log2 N⌉(α + β·M).
// Which of the two a Broadcast or Reduce runs is the group's cost model's
// argmin (the selector, selector.go), per size class, as for AllReduce.
const (
	// chainLatencyBytes is α/β: the bytes a link moves in the time one
	// message costs. 256 KiB: on loopback TCP a message's cost (goroutine
	// hand-offs, wake-ups, framing) is worth a few hundred KiB, so large
	// broadcasts run faster in segments of a few MiB than of 1 MiB (the
	// measurements are in docs/measurements.md).
	chainLatencyBytes = 256 << 10
	// chainMinSegmentBytes and chainMaxSegmentBytes bound the segment
	// size: 64 MiB on 4 ranks is 23 segments of 2.8 MiB, 4 MiB is 6 of
	// 683 KiB.
	chainMinSegmentBytes = 64 << 10
	chainMaxSegmentBytes = 8 << 20
)

// chainSegments is the number of segments of a chain over count elements
// of es bytes (see chainLatencyBytes; a test's tuning.chainSegment fixes
// the segment size instead).
func (g *Group) chainSegments(count, es int) int {
	if g.tune.chainSegment > 0 {
		segElems := max(1, g.tune.chainSegment/es)
		return (count + segElems - 1) / segElems
	}
	return chainSegmentsOf(g.size, count*es, count)
}

// chainSegmentsOf is the default number of segments of a chain of n ranks
// over m bytes in count elements. (A segment larger than the model's
// Segment goes in pieces, as every message: pieces.go.)
func chainSegmentsOf(n, m, count int) int {
	s := int(math.Round(math.Sqrt(float64(max(n-2, 1)) * float64(m) / chainLatencyBytes)))
	s = max(s, (m+chainMaxSegmentBytes-1)/chainMaxSegmentBytes)
	s = min(s, m/chainMinSegmentBytes)
	return min(max(s, 1), count)
}

// chainSegmentsFor is how many segments the formulas cut a chain of n
// ranks over b bytes into (chainSegmentsOf, one element a byte).
func chainSegmentsFor(n int, b float64) int {
	return chainSegmentsOf(n, int(b), max(int(b), 1))
}

// chainBroadcastCost is the chain Broadcast's predicted time
// (cost.Chain, in the segments chainSegmentsFor cuts), agreement step
// included; +Inf below three ranks. chainBroadcastWork is its work
// (cost.ChainWork).
func chainBroadcastCost(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.Chain(m, s, b, chainSegmentsFor(s.Ranks, b), false)
}

func chainBroadcastWork(m cost.Model, s cost.Shape, b float64) float64 {
	return cost.ChainWork(m, s, b, chainSegmentsFor(s.Ranks, b), false)
}

// chainBroadcast is the pipelined chain Broadcast (above).
func (g *Group) chainBroadcast(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agreeAt(ctx, h, agreeChainStep); err != nil || n == 1 || c.count == 0 {
		return err
	}
	es := c.dt.Size()
	segs := g.chainSegments(c.count, es)
	seg := func(k int) []byte {
		lo, hi := ChunkBounds(c.count, segs, k)
		return c.buf[lo*es : hi*es]
	}
	v := mod(g.rank-c.root, n)
	next, prev := mod(g.rank+1, n), mod(g.rank-1, n)
	for round := max(v-1, 0); round < segs+v; round++ {
		step := uint32(round)
		k := round - v // segment to send; k+1 is the one to receive
		sending := v < n-1 && k >= 0
		receiving := v > 0 && k+1 < segs
		var err error
		switch {
		case sending && receiving:
			err = g.sendRecvCopy(ctx, h, step, next, seg(k), prev, seg(k+1))
		case sending:
			err = g.send(ctx, h, step, next, seg(k))
		case receiving:
			err = g.recvCopy(ctx, h, step, prev, seg(k+1))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
