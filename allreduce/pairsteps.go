package allreduce

import (
	"math"
	"math/bits"
	"sort"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// Pair steps: the schedules of recursive doubling (doubling.go) and
// halving-doubling (hd.go, hd_halves.go) fold N ranks onto P, the largest
// power of two ≤ N, and run steps in which partners v and v XOR mask
// exchange. Their fold, their steps and the formulas that price them.

// hdFold is the fold of N ranks onto P, the largest power of two ≤ N:
// the R = N-P even ranks below 2R hand their data to the odd rank above.
type hdFold struct{ n, p2, rem int }

func foldOf(n int) hdFold {
	p2 := 1 << (bits.Len(uint(n)) - 1)
	return hdFold{n: n, p2: p2, rem: n - p2}
}

// virtual is rank r's number among the P active ranks, or -1 for a rank
// that sits out (an even rank below 2R).
func (f hdFold) virtual(r int) int {
	if r < 2*f.rem {
		if r%2 == 0 {
			return -1
		}
		return r / 2
	}
	return r - f.rem
}

// real is the rank of active rank v.
func (f hdFold) real(v int) int {
	if v < f.rem {
		return 2*v + 1
	}
	return v + f.rem
}

// pairFold is the fold and unfold of a pair-step schedule: in bytes sent
// by each even rank below 2R to r+1 (reduced there when reduce is set),
// out bytes sent back by r+1 at the end.
type pairFold struct {
	in     float64
	reduce bool
	out    float64
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
// r < 2R sends fold.in bytes to r+1, which reduces them for an
// all-reduce), the steps among the P active ranks, and the unfold (r+1
// sends fold.out bytes of the result back),
// under the link model: every active rank's clock is followed through the
// steps — c_v ← max(c_v + x·β, max(c_v, c_partner + α + x·β) + x·γ) — so
// ranks that the fold delays are accounted exactly, each step's exchange
// as its lock-step pieces (Model.pieces); O(P log P) per piece.
func pairStepsCost(m cost.Model, s cost.Shape, fold pairFold, steps []pairStep) float64 {
	f := foldOf(s.Ranks)
	clock := make([]float64, f.p2)
	next := make([]float64, f.p2)
	for v := 0; v < f.rem; v++ {
		r := f.real(v)
		clock[v] = m.OneWay(m.Between(s, r-1, r), fold.in, fold.reduce)
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
			c += m.OneWay(m.Between(s, r, r-1), fold.out, false)
		}
		end = math.Max(end, c)
	}
	return end
}

// pairStepsWork is the work (cost.Work) of the schedule pairStepsCost
// prices: the fold's messages of M bytes (reduced) and the unfold's, sent
// one way, and each step's message of every active rank to its partner,
// an exchange (Model.ExchangeWork).
func pairStepsWork(m cost.Model, s cost.Shape, fold pairFold, steps []pairStep) float64 {
	f := foldOf(s.Ranks)
	w := cost.NewWork(m, s)
	for v := 0; v < f.rem; v++ {
		r := f.real(v)
		w.Send(r-1, r, fold.in, 1)
		if fold.reduce {
			w.Reduce(r, fold.in)
		}
		w.Send(r, r-1, fold.out, 1)
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
