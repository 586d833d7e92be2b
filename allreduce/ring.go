package allreduce

import (
	"context"
	"math"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The ring: rank r sends to right = r+1 and receives from left = r-1 (mod N).
//
// Reduce-scatter, N-1 steps. At step s rank r sends chunk (r-s-1) — its own
// input at s = 0, afterwards the partial result it made at step s-1 — and
// combines chunk (r-s-2) received from the left with its own input of that
// chunk. After the last step rank r holds chunk r reduced over all ranks, in
// the fixed order r+1, r+2, ..., r. Each rank sends (N-1)/N·M bytes.
//
// All-gather, N-1 steps. At step s rank r sends chunk (r-s) — its own at
// s = 0, afterwards the one it received at step s-1 — and copies chunk
// (r-s-1) received from the left into place. Each rank sends (N-1)/N·M bytes.
//
// AllReduce is reduce-scatter then all-gather in place: 2(N-1) steps and
// 2(N-1)/N·M bytes per rank, the minimum for any all-reduce.

// chunkBytes is the byte range of chunk i of c's count elements.
func (g *Group) chunkBytes(c *call, i int) (lo, hi int) {
	if c.layout != nil {
		ch := c.layout[mod(i, g.size)]
		lo, hi = ch.Lo, ch.Hi
	} else {
		lo, hi = ChunkBounds(c.count, g.size, mod(i, g.size))
	}
	es := c.dt.Size()
	return lo * es, hi * es
}

func (g *Group) ringAllReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if c.count == 0 {
		return g.agree(ctx, h)
	}
	if g.size == 1 {
		return nil
	}
	if err := g.ringReduceScatterSteps(ctx, h, c, c.buf, c.buf); err != nil {
		return err
	}
	lo, hi := g.chunkBytes(c, g.rank)
	if c.op == Avg {
		g.divide(c.dt, c.buf[lo:hi], g.size)
	}
	c.finals.report(lo, hi)
	h.Step = uint32(g.size - 1)
	return g.ringAllGatherSteps(ctx, h, c, c.buf)
}

func (g *Group) ringReduceScatter(ctx context.Context, h transport.Header, c *call) error {
	lo, hi := g.chunkBytes(c, g.rank)
	if err := g.checkLen("source", len(c.src), c.count*c.dt.Size()); err != nil {
		return err
	}
	if err := g.checkLen("destination (this rank's chunk)", len(c.buf), hi-lo); err != nil {
		return err
	}
	if g.size == 1 || c.count == 0 {
		g.localCopy(c.buf, c.src)
		return g.agree(ctx, h)
	}
	if err := g.ringReduceScatterSteps(ctx, h, c, c.src, c.buf); err != nil {
		return err
	}
	if c.op == Avg {
		g.divide(c.dt, c.buf, g.size)
	}
	return nil
}

func (g *Group) ringAllGather(ctx context.Context, h transport.Header, c *call) error {
	lo, hi := g.chunkBytes(c, g.rank)
	if err := g.checkLen("destination", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	if err := g.checkLen("source (this rank's chunk)", len(c.src), hi-lo); err != nil {
		return err
	}
	if !sameBytes(c.buf[lo:hi], c.src) {
		g.localCopy(c.buf[lo:hi], c.src)
	}
	if g.size == 1 || c.count == 0 {
		return g.agree(ctx, h)
	}
	c.finals.report(lo, hi)
	return g.ringAllGatherSteps(ctx, h, c, c.buf)
}

// ringReduceScatterSteps reduces src over the ring and leaves this rank's
// chunk in dst: dst is the whole buffer when it is src (in place), and only
// this rank's chunk otherwise, in which case src is left unchanged and the
// partial results live in two chunk-sized scratch buffers.
func (g *Group) ringReduceScatterSteps(ctx context.Context, h transport.Header, c *call, src, dst []byte) error {
	n, r := g.size, g.rank
	right, left := mod(r+1, n), mod(r-1, n)
	inPlace := sameBytes(dst, src)
	var partial [2][]byte
	if !inPlace {
		maxChunk := 0
		for i := 0; i < n; i++ {
			lo, hi := g.chunkBytes(c, i)
			maxChunk = max(maxChunk, hi-lo)
		}
		s := g.scratchBytes(2 * maxChunk)
		partial[0], partial[1] = s[:maxChunk], s[maxChunk:]
	}
	for s := 0; s < n-1; s++ {
		slo, shi := g.chunkBytes(c, r-s-1)
		rlo, rhi := g.chunkBytes(c, r-s-2)
		send, local := src[slo:shi], src[rlo:rhi]
		out := local
		if !inPlace {
			if s > 0 {
				send = partial[(s-1)%2][:shi-slo]
			}
			if s == n-2 {
				out = dst
			} else {
				out = partial[s%2][:rhi-rlo]
			}
		}
		if err := g.sendRecvReduce(ctx, h, uint32(s), right, send, left, local, out, localFirst); err != nil {
			return err
		}
	}
	return nil
}

// ringAllGatherSteps circulates every rank's chunk of buf, starting from
// this rank's own, until every rank has all of them, reporting each chunk
// received final (c.finals). h.Step is the step number of the first
// message.
func (g *Group) ringAllGatherSteps(ctx context.Context, h transport.Header, c *call, buf []byte) error {
	n, r := g.size, g.rank
	right, left := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		slo, shi := g.chunkBytes(c, r-s)
		rlo, rhi := g.chunkBytes(c, r-s-1)
		if err := g.sendRecvCopy(ctx, h, h.Step+uint32(s), right, buf[slo:shi], left, buf[rlo:rhi]); err != nil {
			return err
		}
		c.finals.report(rlo, rhi)
	}
	return nil
}

// ringCost is the ring's predicted time: 2(N-1) steps of c = M/N bytes,
// the first N-1 also reducing (each step k lock-step pieces of c/k where
// the model has a Segment: as a ring of k(N-1) steps per phase). On one kind of link every rank waits for
// its left neighbour each step: (N-1)·(2(α + c·β) + c·γ). On K > 1 nodes
// of L ranks the ring crosses K inter-node links and N-K intra-node ones,
// and the time of each phase is its longest path (ringPhaseCost).
func ringCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	switch {
	case n == 1:
		return 0
	case b == 0:
		return m.Agree(s)
	}
	c := b / float64(n)
	k := m.Pieces(c) // each step's exchange goes as k pieces of c/k
	steps, p := int(k)*(n-1), c/k
	if s.Nodes <= 1 {
		return float64(steps) * (2*m.Intra.Time(p) + p*m.Gamma)
	}
	hops := ringInterHops(s, steps)
	return ringPhaseCost(steps, hops, m.Intra.Time(p)+p*m.Gamma, m.Inter.Time(p)+p*m.Gamma, math.Max(m.Inter.Transfer(p), p*m.Gamma)) +
		ringPhaseCost(steps, hops, m.Intra.Time(p), m.Inter.Time(p), m.Inter.Transfer(p))
}

// ringWork is the ring's work (cost.Work): every rank sends 2(N-1)
// chunks of M/N to its right neighbour and reduces N-1 of them. On 2
// ranks the right neighbour is the left one: the sends are exchanges
// (Model.ExchangeWork).
func ringWork(m cost.Model, s cost.Shape, b float64) float64 {
	return ringWorkOf(m, s, b, 2*(s.Ranks-1), true)
}

// ringPhaseCost is the time of one phase of the ring, steps steps of
// which a message moving every step crosses between nodes at most inter
// times (ringInterHops): the longest path through the steps, where a step
// either takes the message from the left neighbour (moveIntra, or
// moveInter across a node boundary) or stays on the rank that sends
// between nodes, whose sends alone take stay each. The longest path
// either moves every step, stays every step, or moves once across the
// inter-node link and stays.
func ringPhaseCost(steps, inter int, moveIntra, moveInter, stay float64) float64 {
	allMove := float64(steps)*moveIntra + float64(inter)*(moveInter-moveIntra)
	return math.Max(allMove, math.Max(float64(steps)*stay, float64(steps-1)*stay+moveInter))
}

// ringInterHops is the most node boundaries w consecutive hops around the
// ring of s's ranks cross (nodes are blocks of LocalSize consecutive
// ranks, the last one SmallestNode): ⌈w/L⌉ on even nodes; more where a
// smaller node puts two boundaries closer.
func ringInterHops(s cost.Shape, w int) int {
	n := s.Ranks
	if s.Nodes <= 1 || n <= 1 || w <= 0 {
		return 0
	}
	// boundary[r]: the hop from rank r to r+1 (mod n) crosses nodes.
	boundary := make([]int, n)
	for r := range n {
		if s.NodeOfRank(r) != s.NodeOfRank((r+1)%n) {
			boundary[r] = 1
		}
	}
	full, rest := w/n, w%n
	perCircle := 0
	for _, b := range boundary {
		perCircle += b
	}
	best, window := 0, 0
	for r := range rest {
		window += boundary[r]
	}
	for start := range n { // the window of rest hops from start
		best = max(best, window)
		if rest > 0 {
			window += boundary[(start+rest)%n] - boundary[start]
		}
	}
	return full*perCircle + best
}

// ringReduceScatterCost is the ring ReduceScatter's predicted time: the
// ring all-reduce's first phase, N-1 steps of c = M/N bytes each reduced
// (ringHalfCost); the agreement step alone when there is nothing to move.
func ringReduceScatterCost(m cost.Model, s cost.Shape, b float64) float64 {
	return ringHalfCost(m, s, b, true)
}

// ringAllGatherCost is the ring AllGather's predicted time: the ring
// all-reduce's second phase, N-1 steps of c = M/N bytes copied.
func ringAllGatherCost(m cost.Model, s cost.Shape, b float64) float64 {
	return ringHalfCost(m, s, b, false)
}

// ringHalfCost is one phase of ringCost on its own, reducing or copying.
func ringHalfCost(m cost.Model, s cost.Shape, b float64, reduce bool) float64 {
	n := s.Ranks
	switch {
	case n == 1:
		return 0
	case b == 0:
		return m.Agree(s)
	}
	c := b / float64(n)
	k := m.Pieces(c)
	steps, p := int(k)*(n-1), c/k
	g := 0.0
	if reduce {
		g = p * m.Gamma
	}
	if s.Nodes <= 1 {
		return float64(steps) * (m.Intra.Time(p) + g)
	}
	return ringPhaseCost(steps, ringInterHops(s, steps), m.Intra.Time(p)+g, m.Inter.Time(p)+g, math.Max(m.Inter.Transfer(p), g))
}

// ringReduceScatterWork and ringAllGatherWork are the work (cost.Work) of
// one phase: every rank sends N-1 chunks of M/N to its right neighbour,
// and in a ReduceScatter reduces them.
func ringReduceScatterWork(m cost.Model, s cost.Shape, b float64) float64 {
	return ringHalfWork(m, s, b, true)
}

func ringAllGatherWork(m cost.Model, s cost.Shape, b float64) float64 {
	return ringHalfWork(m, s, b, false)
}

func ringHalfWork(m cost.Model, s cost.Shape, b float64, reduce bool) float64 {
	return ringWorkOf(m, s, b, s.Ranks-1, reduce)
}

// ringWorkOf is the work of a ring in which every rank sends sends chunks
// of M/N to its right neighbour (exchanges on 2 ranks, where the right
// neighbour is the left one) and, when reduce is set, reduces N-1 of them.
func ringWorkOf(m cost.Model, s cost.Shape, b float64, sends int, reduce bool) float64 {
	n := s.Ranks
	w := cost.NewWork(m, s)
	for r := range n {
		send := w.Send
		if n == 2 {
			send = w.Exchange
		}
		send(r, (r+1)%n, b/float64(n), float64(sends))
		if reduce {
			w.Reduce(r, float64(n-1)*b/float64(n))
		}
	}
	return w.Busiest()
}
