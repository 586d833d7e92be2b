package allreduce

import (
	"context"
	"github.com/ringddp/ringddp/allreduce/cost"
	"math"
	"sort"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Recursive doubling all-reduce, the latency-optimal choice for small
// buffers on transports that do not share memory: ⌈log2 N⌉ steps (plus two
// when N is not a power of two) instead of the ring's 2(N-1), each moving
// the whole buffer, so log2(N)·M bytes per rank.
//
// With P the largest power of two ≤ N and R = N - P: first the ranks below
// 2R fold in pairs (even rank r sends its buffer to r+1 and sits out); the
// remaining P ranks, renumbered 0..P-1, exchange whole buffers with the
// partner whose number differs in bit k, for k = 0, 1, ...; then every odd
// rank below 2R sends the result back to its even partner.
//
// Operand order: a op b and b op a differ in floating point — Max and Min
// of +0 and -0 keep whichever comes first or second, and the sum of two
// NaNs keeps one operand's payload — so partners must not each put their
// own buffer first. Every combination takes the operand of the lower
// (renumbered) rank first: at step k all ranks whose number has bit k
// clear hold the same value A and their partners the same value B, and
// every one of them computes A op B. So every rank ends bitwise identical
// whatever the values, and the same run to run.

func (g *Group) doublingAllReduce(ctx context.Context, h transport.Header, c *call) error {
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
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	rem := n - p2
	buf := c.buf
	peer := g.scratchBytes(len(buf))
	// Fold: even ranks below 2·rem hand their buffer to the next rank.
	newRank := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := g.send(ctx, h, 0, r+1, buf); err != nil {
				return err
			}
			newRank = -1
		} else {
			if err := g.recvReduce(ctx, h, 0, r-1, buf, buf, receivedFirst); err != nil { // rank r-1's operand first
				return err
			}
			newRank = r / 2
		}
	}
	if newRank >= 0 {
		// Ping-pong between buf and scratch: each step sends the current
		// value and reduces the partner's into the other buffer.
		cur, next := buf, peer
		step := uint32(1)
		for mask := 1; mask < p2; mask, step = mask<<1, step+1 {
			partner := newRank ^ mask
			order := localFirst // the lower number's operand first
			if partner < newRank {
				order = receivedFirst
			}
			if partner < rem {
				partner = partner*2 + 1
			} else {
				partner += rem
			}
			if err := g.sendRecvReduce(ctx, h, step, partner, cur, partner, cur, next, order); err != nil {
				return err
			}
			cur, next = next, cur
		}
		if !sameBytes(cur, buf) {
			g.localCopy(buf, cur)
		}
	}
	// Unfold: odd ranks below 2·rem return the result to their partner.
	if r < 2*rem {
		if r%2 == 1 {
			if err := g.send(ctx, h, unfoldStep, r-1, buf); err != nil {
				return err
			}
		} else if err := g.recvCopy(ctx, h, unfoldStep, r+1, buf); err != nil {
			return err
		}
	}
	if c.op == Avg {
		g.divide(c.dt, buf, n)
	}
	return nil
}

// unfoldStep is the step number of the unfold message.
const unfoldStep = ^uint32(0) - 1

// doublingCost is recursive doubling's predicted time: ⌈log2 P⌉ steps
// exchanging and reducing the whole buffer M, α + M·β + M·γ each over the
// link between the partners, plus, when N is not a power of two, the
// fold (one reducing step) and the unfold (one copy). With a fold, some
// active ranks start a step later than their partners, so the time is
// the latest of the P active ranks' clocks, pairStepsCost.
func doublingCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	switch {
	case n == 1:
		return 0
	case b == 0:
		return m.Agree(s)
	}
	return pairStepsCost(m, s, b, doublingSteps(n, b))
}

// doublingSteps are recursive doubling's steps among the active ranks:
// the whole buffer, reduced, at every mask.
func doublingSteps(n int, b float64) []pairStep {
	var steps []pairStep
	for mask := 1; mask < floorPow2(n); mask <<= 1 {
		steps = append(steps, pairStep{mask: mask, bytes: b, reduce: true})
	}
	return steps
}

// doublingWork is recursive doubling's work (cost.Work).
func doublingWork(m cost.Model, s cost.Shape, b float64) float64 {
	return pairStepsWork(m, s, b, doublingSteps(s.Ranks, b))
}

// pairStep is one step of recursive doubling or halving among the active
// ranks of hdFold: partners v and v XOR mask exchange bytes, reducing or
// copying.
type pairStep struct {
	mask   int
	bytes  float64
	reduce bool
}

// pairStepsCost is the time of the fold of N ranks onto P (each even rank
// r < 2R sends its M bytes to r+1, which reduces them), the steps among
// the P active ranks, and the unfold (r+1 sends the M-byte result back),
// under the link model: every active rank's clock is followed through the
// steps — c_v ← max(c_v + x·β, max(c_v, c_partner + α + x·β) + x·γ) — so
// ranks that the fold delays are accounted exactly, each step's exchange
// as its lock-step pieces (Model.pieces); O(P log P) per piece.
func pairStepsCost(m cost.Model, s cost.Shape, b float64, steps []pairStep) float64 {
	f := foldOf(s.Ranks)
	clock := make([]float64, f.p2)
	next := make([]float64, f.p2)
	for v := 0; v < f.rem; v++ {
		r := f.real(v)
		clock[v] = m.OneWay(m.Between(s, r-1, r), b, true)
	}
	nics := nicsOf(m, s, f)
	for _, st := range steps {
		k := m.Pieces(st.bytes) // lock-step pieces of the exchange
		x := st.bytes / k
		for range int(k) {
			start := nics.slots(clock, st.mask, x)
			for v := range clock {
				p := v ^ st.mask
				l := m.Between(s, f.real(v), f.real(p))
				sendStart, recvStart := clock[v], clock[p]
				if start != nil {
					sendStart, recvStart = start[v], start[p]
				}
				got := math.Max(clock[v], recvStart+l.Time(x))
				if st.reduce {
					got += x * m.Gamma
				}
				next[v] = math.Max(sendStart+l.Transfer(x), got)
			}
			clock, next = next, clock
		}
	}
	end := 0.0
	for v, c := range clock {
		if v < f.rem {
			r := f.real(v)
			c += m.OneWay(m.Between(s, r, r-1), b, false)
		}
		end = math.Max(end, c)
	}
	return end
}

// pairStepsWork is the work (cost.Work) of the schedule pairStepsCost
// prices: the fold's messages of M bytes (reduced) and the unfold's, sent
// one way, and each step's message of every active rank to its partner,
// an exchange (Model.ExchangeWork).
func pairStepsWork(m cost.Model, s cost.Shape, b float64, steps []pairStep) float64 {
	f := foldOf(s.Ranks)
	w := cost.NewWork(m, s)
	for v := 0; v < f.rem; v++ {
		r := f.real(v)
		w.Send(r-1, r, b, 1)
		w.Reduce(r, b)
		w.Send(r, r-1, b, 1)
	}
	for _, st := range steps {
		for v := 0; v < f.p2; v++ {
			r := f.real(v)
			w.Exchange(r, f.real(v^st.mask), st.bytes, 1)
			if st.reduce {
				w.Reduce(r, st.bytes)
			}
		}
	}
	return w.Busiest()
}

// stepNICs are the shared NICs (Model.NICs) of the P active ranks of a
// pair-step schedule: for each active rank its node's NIC, and the link
// model, so that a step's messages between nodes take their NIC's slots
// as the simulator gives them.
type stepNICs struct {
	m     cost.Model
	s     cost.Shape
	f     hdFold
	nic   []int // by active rank
	queue [][]int
	free  []float64
}

// nicsOf is the shared NICs of fold f's active ranks on shape s, or nil
// when nothing is shared.
func nicsOf(m cost.Model, s cost.Shape, f hdFold) *stepNICs {
	if m.NICs <= 0 || s.Nodes <= 1 || s.LocalSize <= 0 {
		return nil
	}
	n := &stepNICs{m: m, s: s, f: f, nic: make([]int, f.p2), queue: make([][]int, s.Nodes*m.NICs), free: make([]float64, s.Nodes*m.NICs)}
	for v := range n.nic {
		n.nic[v] = m.NICOf(s, f.real(v))
	}
	return n
}

// slots is when each active rank's message of x bytes to its partner
// (v ^ mask) starts, its ranks at clocks clock: at its clock within a
// node; between nodes at the later of its clock and its NIC's free time,
// a NIC taking its messages in order of clock, then rank (as the
// simulator's NICs do). nil when nothing is shared.
func (n *stepNICs) slots(clock []float64, mask int, x float64) []float64 {
	if n == nil {
		return nil
	}
	start := append([]float64(nil), clock...)
	for i := range n.queue {
		n.queue[i] = n.queue[i][:0]
	}
	for v := range clock {
		a, b := n.f.real(v), n.f.real(v^mask)
		if a/n.s.LocalSize != b/n.s.LocalSize {
			n.queue[n.nic[v]] = append(n.queue[n.nic[v]], v)
		}
	}
	tx := n.m.Inter.Transfer(x)
	for i, q := range n.queue {
		sort.Slice(q, func(a, b int) bool {
			if clock[q[a]] != clock[q[b]] {
				return clock[q[a]] < clock[q[b]]
			}
			return q[a] < q[b]
		})
		for _, v := range q {
			start[v] = math.Max(clock[v], n.free[i])
			n.free[i] = start[v] + tx
		}
	}
	return start
}
