package allreduce

import (
	"math"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// The cores bound (Model.Cores). Moving a message and reducing it are work
// for the cores of the host its ranks run on: on loopback tcp each byte is
// copied into the kernel by the sender's core and out of it by the
// receiver's, in process a message is one memory copy. While every rank
// has a core of its own, the schedule's critical path (the formulas'
// walks through the steps) is the time. When a node's ranks outnumber its
// cores, as 4 ranks on a 2-core host, the cores are the bottleneck: a
// node cannot finish a collective sooner than the work its ranks do
// divided by its cores, however the schedule overlaps it. So with Cores
// = C set, every prediction is
//
//	max(schedule, W/C),  W = the busiest node's work: β·Σ the bytes its
//	                     ranks send (β the link's large-message rate, in
//	                     whatever size regime a message falls; times
//	                     Model.ExchangeWork for a byte sent to the rank it
//	                     is received from in the same step) + γ·Σ the
//	                     bytes its ranks reduce.
//
// The α of a message is not work: it is the time a message takes to be
// seen, not time a core spends. Nor are the size regimes (Link): a
// message that fits the socket buffers or the caches is seen sooner, but
// a core still copies each of its bytes; priced at the regimes' rates,
// the bound predicted Tree over tcp within 25% at 11 of 15 sizes against
// 15 at β (docs/scaling.md). Algorithms that move the same bytes the same
// way have the same W (the ring and Tree each send 2(N−1)·M bytes in all,
// one way, and reduce (N−1)·M on one node), so where the bound holds they
// take the same time whatever their schedules' critical paths;
// halving-doubling sends as many bytes in pairwise exchanges (ExchangeWork
// of theirs, 0.84 as fitted over loopback tcp), recursive doubling
// N·log2 N·M bytes so.
// The simulator applies the same bound between two AlignClocks
// (sim.Config.Cores), and the formulas' W is the work it counts
// (TestWorkMatchesSimulator). 0 (unset): no bound, the schedule's time
// alone. cmd/bench -calibrate refits the model with the host's logical
// CPUs and without the bound, and keeps the better fit.

// nodeWork is the work of a collective's ranks, summed by node (seconds of
// one core): what the cores bound divides.
type nodeWork struct {
	m    Model
	s    Shape
	node []float64
}

// newNodeWork is an empty tally for shape s under model m.
func newNodeWork(m Model, s Shape) *nodeWork {
	return &nodeWork{m: m, s: s, node: make([]float64, max(s.Nodes, 1))}
}

// send counts count messages of x bytes from rank r to rank d, at the
// large-message rate β of the link between them.
func (w *nodeWork) send(r, d int, x, count float64) {
	if x <= 0 || count <= 0 {
		return
	}
	w.node[w.s.nodeOfRank(r)] += count * x * w.m.between(w.s, r, d).Beta
}

// exchange counts count messages of x bytes from rank r to rank d sent
// while r receives from d (a pairwise exchange): send's work times
// Model.ExchangeWork.
func (w *nodeWork) exchange(r, d int, x, count float64) {
	w.send(r, d, x, count*w.m.exchangeWork())
}

// exchangeWork is the work of a byte sent in a pairwise exchange as a
// fraction of a one-way byte's (Model.ExchangeWork; unset, 1).
func (m Model) exchangeWork() float64 {
	if m.ExchangeWork <= 0 {
		return 1
	}
	return m.ExchangeWork
}

// reduce counts x bytes reduced on rank r.
func (w *nodeWork) reduce(r int, x float64) {
	w.node[w.s.nodeOfRank(r)] += x * w.m.Gamma
}

// busiest is the largest node's work.
func (w *nodeWork) busiest() float64 {
	t := 0.0
	for _, x := range w.node {
		t = math.Max(t, x)
	}
	return t
}

// bounded is t raised to the cores bound of work w (the busiest node's
// seconds of work) under m, for a collective of b bytes per rank: t
// itself when m has no Cores.
func (m Model) bounded(t, w, b float64) float64 {
	if m.Cores <= 0 {
		return t
	}
	return math.Max(t, w*m.cacheWork(b)/float64(m.Cores))
}

// CollectiveBytes is the bytes per rank of the collective a message with
// header h belongs to (its Count elements of its DType): what
// Model.CacheWork is keyed on, and what the simulator needs to key its
// sim.Config.CacheWork alike (sim.Config.CollectiveBytes).
func CollectiveBytes(h transport.Header) int { return int(h.Count) * elemSize(h) }

// cacheWork is the factor on the work of a collective of b bytes per
// rank: Model.CacheWork up to CacheWorkBytes, else 1.
func (m Model) cacheWork(b float64) float64 {
	if m.CacheWorkBytes > 0 && m.CacheWork > 0 && b <= float64(m.CacheWorkBytes) {
		return m.CacheWork
	}
	return 1
}

// withoutLatency is m with no α: what is left of a formula is work.
func (m Model) withoutLatency() Model {
	m.Intra.Alpha, m.Inter.Alpha = 0, 0
	return m
}
