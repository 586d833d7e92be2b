package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
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
	return pairStepsCost(m, s, pairFold{in: b, reduce: true, out: b}, doublingSteps(n, b))
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
	return pairStepsWork(m, s, pairFold{in: b, reduce: true, out: b}, doublingSteps(s.Ranks, b))
}
