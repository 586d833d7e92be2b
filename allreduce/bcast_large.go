package allreduce

import (
	"context"
	"fmt"
	"github.com/ringddp/ringddp/allreduce/cost"
	"math"

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
// argmin (useChain), per size class, as Auto is for AllReduce.
const (
	// chainLatencyBytes is α/β: the bytes a link moves in the time one
	// message costs. 256 KiB: on loopback TCP a message's cost (goroutine
	// hand-offs, wake-ups, framing) is worth a few hundred KiB; 64 MiB
	// broadcasts on 4 ranks ran faster in 4 or 8 MiB segments than in
	// 1 MiB ones on a loaded 2-core host.
	chainLatencyBytes = 256 << 10
	// chainMinSegmentBytes and chainMaxSegmentBytes bound the segment
	// size: 64 MiB on 4 ranks is 23 segments of 2.8 MiB, 4 MiB is 6 of
	// 683 KiB.
	chainMinSegmentBytes = 64 << 10
	chainMaxSegmentBytes = 8 << 20
)

// broadcast is Broadcast: the binomial tree or, on three ranks or more,
// the pipelined chain, whichever the cost model predicts faster
// (useChain).
func (g *Group) broadcast(ctx context.Context, h transport.Header, c *call) error {
	if g.useChain(KindBroadcast, len(c.buf)) {
		return g.chainBroadcast(ctx, h, c)
	}
	return g.treeBroadcast(ctx, h, c)
}

// useChain says whether a Broadcast (kind KindBroadcast) or Reduce of the
// given bytes goes by chain (chainFor), the cost model's choice made once
// per size class, on the group's shape if known, else its ranks on one
// node.
func (g *Group) useChain(kind Kind, bytes int) bool {
	if g.rooted != RootedAuto || g.size <= 2 || g.tune.chainMin > 0 {
		return g.chainFor(kind, bytes, cost.Shape{})
	}
	picks := &g.chainPicks[0]
	if kind == KindReduce {
		picks = &g.chainPicks[1]
	}
	k := sizeClass(bytes)
	if picks[k] == 0 {
		picks[k] = 1
		if g.chainFor(kind, bytes, g.knownShape()) {
			picks[k] = 2
		}
	}
	return picks[k] == 2
}

// chainFor says whether a Broadcast or Reduce of the given bytes on a
// group of shape s goes by chain: on three ranks or more, under
// RootedChain, or under RootedAuto when the group's model predicts the
// chain faster than the binomial tree at the lower end of the size class
// (as Auto chooses). A test's tuning.chainMin sets a fixed threshold
// instead of the model.
func (g *Group) chainFor(kind Kind, bytes int, s cost.Shape) bool {
	switch {
	case g.size <= 2 || g.rooted == RootedTree:
		return false
	case g.rooted == RootedChain:
		return true
	case g.tune.chainMin > 0:
		return bytes >= g.tune.chainMin
	}
	return chainFaster(g.model, s, kind, float64(classBytes(sizeClass(bytes))))
}

// chainFaster reports whether m prices the chain below the binomial tree
// for a Broadcast (kind KindBroadcast) or Reduce of b bytes on shape s. On
// a tie (within a relative 1e-9: both at the cores bound of their equal
// work, cost.Work) the shorter schedule wins: the one whose time without
// the bound is less (the chain, on large buffers: over 4 tcp processes on
// 2 cores it measured 1.4-2x faster than the tree from 1 MiB, where both
// are bound).
func chainFaster(m cost.Model, s cost.Shape, kind Kind, b float64) bool {
	tree, chain := rootedCosts(m, s, kind, b)
	if math.Abs(chain-tree) > 1e-9*math.Max(chain, tree) || m.Cores <= 0 {
		return chain < tree
	}
	reduce := kind == KindReduce
	return cost.Chain(m, s, b, chainSegmentsFor(s.Ranks, b), reduce) < cost.Binomial(m, s, b, reduce)
}

// knownShape is the group's shape if known, else its ranks on one node.
func (g *Group) knownShape() cost.Shape {
	g.seq.mu.Lock()
	defer g.seq.mu.Unlock()
	if g.shape != nil {
		return *g.shape
	}
	return cost.FlatShape(g.size)
}

// RootedScheduleFor is the schedule a Broadcast (kind KindBroadcast) or
// Reduce of the given bytes runs on g: RootedTree or RootedChain, as
// AlgorithmFor says for AllReduce.
func (g *Group) RootedScheduleFor(kind Kind, bytes int) RootedSchedule {
	if g.chainFor(kind, bytes, g.knownShape()) {
		return RootedChain
	}
	return RootedTree
}

// rootedCosts are the binomial tree's and the chain's predicted times for
// a Broadcast (kind KindBroadcast) or Reduce of b bytes on shape s, the
// agreement step included (cost.Binomial, cost.Chain), each raised to its cores
// bound (cost.Work), the chain's +Inf below three ranks.
func rootedCosts(m cost.Model, s cost.Shape, kind Kind, b float64) (tree, chain float64) {
	reduce := kind == KindReduce
	tree = m.Bounded(cost.Binomial(m, s, b, reduce), cost.BinomialWork(m, s, b, reduce), b)
	chain = m.Bounded(cost.Chain(m, s, b, chainSegmentsFor(s.Ranks, b), reduce), cost.ChainWork(m, s, b, chainSegmentsFor(s.Ranks, b), reduce), b)
	return tree, chain
}

// rootedWork is the busiest node's work (cost.Work) of the schedule
// broadcastCost or reduceCost prices: the faster of the two.
func rootedWork(m cost.Model, s cost.Shape, kind Kind, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	reduce := kind == KindReduce
	if chainFaster(m, s, kind, b) {
		return cost.ChainWork(m, s, b, chainSegmentsFor(s.Ranks, b), reduce)
	}
	return cost.BinomialWork(m, s, b, reduce)
}

// RootedPrediction is the predicted time of Broadcast and Reduce on a
// shape, under a model: each schedule's (agreement step included; the
// chain's +Inf below three ranks) and the one a group runs, Chain set
// when it is the chain.
type RootedPrediction struct {
	TreeSeconds, ChainSeconds float64
	Chain                     bool
}

// PredictRooted predicts a Broadcast (kind KindBroadcast) or Reduce
// (KindReduce) of bytes on shape s under m, and says which schedule a
// group with that model runs for it (the faster at the lower end of the
// size class, as the group chooses once per class).
func PredictRooted(m cost.Model, s cost.Shape, kind Kind, bytes int) (RootedPrediction, error) {
	if kind != KindBroadcast && kind != KindReduce {
		return RootedPrediction{}, fmt.Errorf("%w: PredictRooted of %v: only Broadcast and Reduce have a schedule to choose", ErrInvalid, kind)
	}
	if s.Ranks == 1 {
		return RootedPrediction{ChainSeconds: math.Inf(1)}, nil
	}
	tree, chain := rootedCosts(m, s, kind, float64(bytes))
	p := RootedPrediction{TreeSeconds: tree, ChainSeconds: chain}
	if s.Ranks > 2 {
		p.Chain = chainFaster(m, s, kind, float64(classBytes(sizeClass(bytes))))
	}
	return p, nil
}

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

// broadcastCost is the predicted time of Broadcast of b bytes on a group
// of shape s: the faster of the binomial tree and, on three ranks or
// more, the chain (what useChain picks), agreement step included.
func broadcastCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	return min(rootedCosts(m, s, KindBroadcast, b))
}

// reduceCost is the predicted time of Reduce of b bytes: as Broadcast,
// each step also reducing what it receives.
func reduceCost(m cost.Model, s cost.Shape, b float64) float64 {
	if s.Ranks == 1 {
		return 0
	}
	return min(rootedCosts(m, s, KindReduce, b))
}

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
