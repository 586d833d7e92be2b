package cost

import "math"

// Work is the work of a collective's ranks, summed by node (seconds of
// one core): what the cores bound divides.
//
// The cores bound (Model.Cores): moving a message and reducing it are work
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
// a core still copies each of its bytes (priced at the regimes' rates,
// the bound predicted worse: docs/measurements.md). Algorithms that move
// the same bytes the same way have the same W (the ring and Tree each
// send 2(N−1)·M bytes in all, one way, and reduce (N−1)·M on one node),
// so where the bound holds they take the same time whatever their
// schedules' critical paths; halving-doubling sends as many bytes in
// pairwise exchanges (ExchangeWork of theirs), recursive doubling
// N·log2 N·M bytes so.
// The simulator applies the same bound between two AlignClocks
// (its Config.Cores), and the formulas' W is the work it counts
// (TestWorkMatchesSimulator). 0 (unset): no bound, the schedule's time
// alone. cmd/bench -calibrate refits the model with the host's logical
// CPUs and without the bound, and keeps the better fit.
type Work struct {
	m    Model
	s    Shape
	node []float64
}

// NewWork is an empty tally for shape s under model m.
func NewWork(m Model, s Shape) *Work {
	return &Work{m: m, s: s, node: make([]float64, max(s.Nodes, 1))}
}

// Send counts count messages of x bytes from rank r to rank d, at the
// large-message rate β of the link between them.
func (w *Work) Send(r, d int, x, count float64) {
	if x <= 0 || count <= 0 {
		return
	}
	w.node[w.s.NodeOfRank(r)] += count * x * w.m.Between(w.s, r, d).Beta
}

// Exchange counts count messages of x bytes from rank r to rank d sent
// while r receives from d (a pairwise exchange): Send's work times
// Model.ExchangeWork.
func (w *Work) Exchange(r, d int, x, count float64) {
	w.Send(r, d, x, count*w.m.exchangeWork())
}

// exchangeWork is the work of a byte sent in a pairwise exchange as a
// fraction of a one-way byte's (Model.ExchangeWork; unset, 1).
func (m Model) exchangeWork() float64 {
	if m.ExchangeWork <= 0 {
		return 1
	}
	return m.ExchangeWork
}

// Reduce counts x bytes reduced on rank r.
func (w *Work) Reduce(r int, x float64) {
	w.node[w.s.NodeOfRank(r)] += x * w.m.Gamma
}

// Busiest is the largest node's work.
func (w *Work) Busiest() float64 {
	t := 0.0
	for _, x := range w.node {
		t = math.Max(t, x)
	}
	return t
}

// Bounded is t raised to the cores bound of work w (the busiest node's
// seconds of work) under m, for a collective of b bytes per rank: t
// itself when m has no Cores.
func (m Model) Bounded(t, w, b float64) float64 {
	if m.Cores <= 0 {
		return t
	}
	return math.Max(t, w*m.cacheWork(b)/float64(m.Cores))
}

// cacheWork is the factor on the work of a collective of b bytes per
// rank: Model.CacheWork up to CacheWorkBytes, else 1.
func (m Model) cacheWork(b float64) float64 {
	if m.CacheWorkBytes > 0 && m.CacheWork > 0 && b <= float64(m.CacheWorkBytes) {
		return m.CacheWork
	}
	return 1
}

// WithoutLatency is m with no α: what is left of a formula is work.
func (m Model) WithoutLatency() Model {
	m.Intra.Alpha, m.Inter.Alpha = 0, 0
	return m
}
