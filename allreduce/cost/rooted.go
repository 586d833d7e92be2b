package cost

import (
	"math"
	"math/bits"
)

// The formulas of Broadcast's and Reduce's schedules (Binomial,
// Chain): every rank's clock followed through the schedule's messages
// by the link model's rules (the package doc; package sim's doc gives them in
// full), as Tree's formula does, so that they are the simulator's time for
// the schedule, not a bound on it:
//
//	a message of x bytes goes in k = ⌈x/Segment⌉ pieces of x/k (Model.Segment),
//	each posted at the sender's clock t:
//	  Ports 0:  start = max(t, egress free); the sender's egress and
//	            clock move to start + x/k·β;
//	  Ports ≥ 1: start = max(t, the sender's first free port, its link to
//	            the receiver); port and link busy until start + x/k·β; the
//	            sender's clock stays at start;
//	  arrival = start + α + x/k·β, β of the piece's size regime, α times
//	            Model.LoneAlpha for a lone send (the binomial tree's sends,
//	            a chain rank's rounds that only send);
//	a receive of a piece ends at max(clock, arrival), plus x/k·γ when it
//	reduces; an exchange (the chain's rounds) posts its piece and receives
//	the peer's from the same clock, ending at the later of the two, piece
//	by piece in lock step.
//
// Both start with the agreement step: a 0-byte exchange with the ring
// neighbours, after which rank r's clock is the α of the link from its
// left neighbour. The root is rank 0 (whose ranks the shape's nodes
// place); shared NICs (Model.NICs) are not counted.
//
// The binomial tree's rounds overlap where the old count of ⌈log2 N⌉
// whole transfers did not: a rank sends to its children one after the
// other, each message's latency overlapping the next one's transfer, and
// a Reduce's later child sends while the parent is still receiving the
// earlier one; the chain reduces a segment while the next is on its way.
// Those counts were up to 44% above the simulator (a 3-rank Reduce of
// 8 MiB); these equal it (TestRootedScheduleRuns).

// rootedWalk follows each rank's clock through a Broadcast or Reduce.
type rootedWalk struct {
	m     Model
	s     Shape
	clock []float64
	// egress is each rank's egress-free time (Ports 0); ports, its ports'
	// free times, and links, its links' free times by peer (Ports ≥ 1).
	egress []float64
	ports  [][]float64
	links  []map[int]float64
}

// newRootedWalk is the walk's state after the agreement step.
func newRootedWalk(m Model, s Shape) *rootedWalk {
	n := s.Ranks
	w := &rootedWalk{m: m, s: s, clock: make([]float64, n), egress: make([]float64, n)}
	if m.Ports > 0 {
		w.ports, w.links = make([][]float64, n), make([]map[int]float64, n)
		for r := range n {
			w.ports[r], w.links[r] = make([]float64, m.Ports), map[int]float64{}
		}
	}
	for r := range n {
		w.clock[r] = m.Between(s, (r+n-1)%n, r).Alpha // 0 bytes from the left neighbour, posted at 0
	}
	return w
}

// end is the last rank's clock.
func (w *rootedWalk) end() float64 {
	t := 0.0
	for _, c := range w.clock {
		t = max(t, c)
	}
	return t
}

// post sends a piece of p bytes from r to d at r's clock t and returns
// the clock r goes on with and the piece's arrival; lone: r receives
// nothing in that step (Model.LoneAlpha).
func (w *rootedWalk) post(r, d int, p, t float64, lone bool) (sent, arrival float64) {
	l := w.m.Between(w.s, r, d)
	tx := l.Transfer(p)
	alpha := w.m.AlphaOf(l, lone)
	if w.m.Ports <= 0 {
		start := max(t, w.egress[r])
		w.egress[r] = start + tx
		return start + tx, start + alpha + tx
	}
	ports := w.ports[r]
	port := 0 // the port free first, the lowest on a tie
	for i, f := range ports {
		if f < ports[port] {
			port = i
		}
	}
	start := max(t, ports[port], w.links[r][d])
	ports[port], w.links[r][d] = start+tx, start+tx
	return start, start + alpha + tx
}

// send sends a whole message of x bytes from r to d, its pieces back to
// back (lone sends: the binomial tree's ranks send and receive in
// different steps), and returns the pieces' arrivals.
func (w *rootedWalk) send(r, d int, x float64) []float64 {
	k := w.m.Pieces(x)
	arrivals := make([]float64, int(k))
	for j := range arrivals {
		w.clock[r], arrivals[j] = w.post(r, d, x/k, w.clock[r], true)
	}
	return arrivals
}

// recv takes a message of x bytes whose pieces arrive at arrivals into
// rank d, reducing each piece when reduce is set.
func (w *rootedWalk) recv(d int, arrivals []float64, x float64, reduce bool) {
	p := x / float64(len(arrivals))
	for _, a := range arrivals {
		w.clock[d] = max(w.clock[d], a)
		if reduce {
			w.clock[d] += p * w.m.Gamma
		}
	}
}

// lowBit is the lowest set bit of v ≥ 1.
func lowBit(v int) int { return 1 << bits.TrailingZeros(uint(v)) }

// Binomial is the time of allreduce's binomial tree moving b bytes
// on shape s, a Reduce when reduce is set: in a Broadcast rank v receives
// from v − lowBit(v) and sends to v + mask for each mask below lowBit(v)
// (every mask below N at the root), the largest first; in a Reduce it
// receives and reduces from v | mask for each mask below lowBit(v),
// smallest first, then sends to v − lowBit(v).
func Binomial(m Model, s Shape, b float64, reduce bool) float64 {
	n := s.Ranks
	if n <= 1 || b <= 0 {
		return m.Agree(s)
	}
	w := newRootedWalk(m, s)
	arrivals := make([][]float64, n) // by receiver (Broadcast) or sender (Reduce)
	top := 1 << bits.Len(uint(n-1))  // the root's masks are those below it
	if !reduce {
		for v := range n {
			below := top
			if v > 0 {
				below = lowBit(v)
				w.recv(v, arrivals[v], b, false)
			}
			for mask := below >> 1; mask > 0; mask >>= 1 {
				if v+mask < n {
					arrivals[v+mask] = w.send(v, v+mask, b)
				}
			}
		}
		return w.end()
	}
	for v := n - 1; v >= 0; v-- {
		below := top
		if v > 0 {
			below = lowBit(v)
		}
		for mask := 1; mask < below; mask <<= 1 {
			if c := v | mask; c < n {
				w.recv(v, arrivals[c], b, true)
			}
		}
		if v > 0 {
			arrivals[v] = w.send(v, v-below, b)
		}
	}
	return w.end()
}

// Chain is the time of allreduce's pipelined chain moving b bytes on
// shape s in S = segs segments, a Reduce
// when reduce is set: in round q, rank v sends segment q − v to v + 1
// while it receives segment q − v + 1 from v − 1, exchanging the pieces of
// the two in lock step (a Reduce runs the same from the other end, each
// received segment reduced); S + N − 2 rounds. +Inf on fewer than three
// ranks (it does not run there).
func Chain(m Model, s Shape, b float64, segs int, reduce bool) float64 {
	n := s.Ranks
	if n <= 2 {
		return math.Inf(1)
	}
	if b <= 0 {
		return m.Agree(s)
	}
	x := b / float64(segs)
	k := int(m.Pieces(x))
	p := x / float64(k)
	w := newRootedWalk(m, s)
	place := func(i int) int { return chainPlace(n, i, reduce) }
	arrivals := make([]float64, n) // this piece's arrival at each position
	for q := range segs + n - 2 {
		for range k { // the pieces, in lock step
			for i := range n {
				r := place(i)
				seg := q - i // the segment position i sends this round
				sending := i < n-1 && seg >= 0 && seg < segs
				receiving := i > 0 && seg+1 >= 0 && seg+1 < segs
				t := w.clock[r]
				end := t
				if sending {
					end, arrivals[i+1] = w.post(r, place(i+1), p, t, !receiving) // sending alone: a lone send
				}
				if receiving {
					got := max(t, arrivals[i])
					if reduce {
						got += p * m.Gamma
					}
					end = max(end, got)
				}
				w.clock[r] = end
			}
		}
	}
	return w.end()
}

// BinomialWork is the binomial tree's work (Work): each rank but the
// root receives the b bytes once from v − lowBit(v) (a Broadcast), or
// sends them there to be reduced (a Reduce).
func BinomialWork(m Model, s Shape, b float64, reduce bool) float64 {
	w := NewWork(m, s)
	for v := 1; v < s.Ranks; v++ {
		parent := v - lowBit(v)
		if reduce {
			w.Send(v, parent, b, 1)
			w.Reduce(parent, b)
		} else {
			w.Send(parent, v, b, 1)
		}
	}
	return w.Busiest()
}

// ChainWork is the chain's work (Work): every link of the chain
// carries the S segments once, each reduced on arrival in a Reduce; +Inf
// where the chain does not run, as Chain.
func ChainWork(m Model, s Shape, b float64, segs int, reduce bool) float64 {
	n := s.Ranks
	if n <= 2 {
		return math.Inf(1)
	}
	if b <= 0 {
		return 0
	}
	fsegs := float64(segs)
	w := NewWork(m, s)
	for i := range n - 1 {
		from, to := chainPlace(n, i, reduce), chainPlace(n, i+1, reduce)
		if reduce {
			w.Reduce(to, b)
		}
		w.Send(from, to, b/fsegs, fsegs)
	}
	return w.Busiest()
}

// chainPlace is the rank at position i of the chain of n ranks (0: the
// root's end for a Broadcast, the tail's for a Reduce); data flows from
// position i to i + 1.
func chainPlace(n, i int, reduce bool) int {
	if reduce {
		return n - 1 - i
	}
	return i
}
