package allreduce

import (
	"fmt"
	"math"
	"math/bits"
)

// The cost model. Each algorithm's file gives its predicted time as a
// closed formula of the model (below), the group's shape and the bytes of
// the call, next to its schedule; the table in select.go holds them, Auto
// takes the cheapest algorithm that can run (its argmin), and the
// simulator (package sim) runs the same schedules under the same link
// model, so formula and schedule are checked against each other
// (TestCostMatchesSimulator).
//
// The link model, per message of b bytes over a link l = (α, β):
//
//	a send occupies the sender for b·β seconds from its start (one
//	message at a time; with Model.Ports ≥ 1 it occupies one of the
//	sender's ports instead, and the sender goes on), and the message
//	arrives at start + α + b·β (β of the regime b falls in: Link);
//	a receive ends at max(its start, the arrival), plus b·γ when it
//	reduces the payload into a buffer (a plain copy costs nothing more);
//	an exchange (send to one rank while receiving from another) ends when
//	both halves have.
//
// So one ring step moving c bytes costs α + c·β (+ c·γ when it reduces),
// and a chain of steps adds up. Links within a node (Intra) and between
// nodes (Inter) have their own α and β; an algorithm that ignores the
// topology pays the slower link on every step once the group spans
// several nodes.

// Link is the cost of messages over one kind of link: Alpha seconds per
// message plus Beta seconds per byte, in up to three regimes of message
// size. Where CacheBytes is set, messages of at most that many bytes cost
// CacheBeta per byte instead: memory moves several times faster while a
// message fits the caches, which is what in-process and loopback
// transports are made of. Where SmallBytes is set too (SmallBytes ≤
// CacheBytes, or alone), messages of at most SmallBytes bytes cost
// SmallBeta per byte: on loopback tcp a message that fits the socket
// buffers is written in one go and read as it lands, and costs little
// beyond its latency. cmd/bench -calibrate fits the regimes that the
// measurements show; a zero size means no such regime (profiles written
// before a regime existed read as having none).
type Link struct {
	Alpha      float64 `json:"alpha_s"`
	Beta       float64 `json:"beta_s_per_byte"`
	CacheBeta  float64 `json:"cache_beta_s_per_byte,omitempty"`
	CacheBytes int     `json:"cache_bytes,omitempty"`
	SmallBeta  float64 `json:"small_beta_s_per_byte,omitempty"`
	SmallBytes int     `json:"small_bytes,omitempty"`

	// share, when above 1, is how many messages leave through one NIC
	// at once with this one (Model.NICs; set by shared, never stored).
	share float64
}

// time is the time of one message of b bytes: α + b·β; shared by k
// messages on one NIC, the later of that and k·b·β, the time the NIC
// takes to carry them all (the queue's later messages wait on it, the
// earlier ones on their latency, and over the steps of a schedule the
// ranks keep the offsets the queue gave them).
func (l Link) time(b float64) float64 {
	tx := l.transfer(b)
	if l.share > 1 {
		return math.Max(l.Alpha+tx, l.share*tx)
	}
	return l.Alpha + tx
}

// transfer is the per-byte part of a message of b bytes: the time it
// occupies the sender's link.
func (l Link) transfer(b float64) float64 {
	switch {
	case l.SmallBytes > 0 && b <= float64(l.SmallBytes):
		return b * l.SmallBeta
	case l.CacheBytes > 0 && b <= float64(l.CacheBytes):
		return b * l.CacheBeta
	}
	return b * l.Beta
}

// Model is the cost model of a machine: its links within a node and
// between nodes, Gamma, the seconds per byte a rank spends reducing a
// received payload into its buffer, and Ports, how a rank's sends
// overlap.
//
// Ports is how many messages a rank can have on the wire at once, to
// distinct peers, while it goes on with its work (its egress ports):
//
//   - 0 (unset, and every profile written before it existed): the rank
//     is busy for each message it sends, b·β, so its sends are
//     serialised with each other and with the receives and reductions
//     that follow them in its program (the link model above).
//   - k ≥ 1: a send is handed to the first of the rank's k ports to be
//     free and the rank goes on at once; the port carries the message
//     for b·β (it arrives at start + α + b·β as before), one message at a
//     time per port and per link (ordered pair of ranks). 1 is a single
//     NIC that moves data by DMA; N−1 is a connection per peer with a
//     writer of its own, as the tcp transport has (on loopback a
//     message that fits the socket buffers leaves the sender at once).
//
// It matters to schedules in which a rank sends to several peers in turn,
// or sends without receiving in the same step: Tree (an interior rank
// sends to its parent and its children) and the binomial Reduce and
// Broadcast (also inside hierarchical, torus and mesh), whose formulas
// follow it (dtree.go, rooted_cost.go); and the fold of doubling and
// halving-doubling on a number of ranks that is not a power of two, whose
// formula counts each send as Ports 0 does (an upper bound, within 11% of
// the simulator in TestCostMatchesSimulator). Ring, doubling and halving-doubling exchange
// one message each way per step and take the same time whatever Ports is.
// A profile fits it to its algorithms' measured times (cmd/bench
// -calibrate).
//
// Segment, where set, is the largest message sent at once: the schedules
// cut larger messages into pieces of at most Segment bytes, exchanged in
// lock step (pieces.go), and the formulas count them so, an exchange of x
// bytes as k = ⌈x/Segment⌉ exchanges of x/k (each in the size regime of
// x/k), a message alone as its pieces back to back (oneWay). It is a
// property of the transport, not fitted: 256 KiB over tcp
// (DefaultModelFor), none in process or over shared memory, where a
// message is one memory copy whatever its size. Tree keeps its segments
// at most Segment. Every rank
// must have the same Segment (as the same model), or their pieces differ
// and the collective fails with a mismatch.
//
// NICs, where set, is how many NICs the ranks of a node share for their
// inter-node messages (as the simulator's sim.Config.NICs): a NIC
// carries one message at a time, so when c ranks of a node send between
// nodes at once, each of the ⌈c/NICs⌉ messages on a NIC costs the
// inter-node per-byte time that many times over (the last of them
// arrives that much later). The formulas count it: doubling's and
// halving-doubling's steps give each message between nodes its NIC's
// slot, as the simulator does (stepNICs); Tree's rounds place each such
// send in its NIC's earliest gap (roundNICs); torus and mesh, whose L
// ranks of a node run their inter-node all-reduces side by side, price
// them as one over a link shared ⌈L/NICs⌉ ways (Link.shared, sharedBy).
// The ring and hierarchical send between nodes from one rank per node at
// a time and share nothing. 0 (unset): a link per rank, nothing shared.
// cmd/bench -calibrate leaves it 0 (one host has no NIC between nodes).
//
// Cores, where set, is how many cores the ranks of a node share for the
// work of moving and reducing bytes: every prediction is at least the
// busiest node's work divided by Cores (cores.go), which binds when ranks
// outnumber cores. 0 (unset): no bound. cmd/bench -calibrate refits the
// model with the host's logical CPUs and without the bound, and keeps
// the better fit.
//
// ExchangeWork, where set, is the cores bound's work of a byte sent to
// the rank it is received from in the same step (a pairwise exchange, as
// doubling's and halving-doubling's steps are, and the ring's on 2
// ranks), as a fraction of the work of a byte sent one way (β): on
// loopback tcp a connection that carries data both ways at once costs
// its cores less per byte than two that each carry it one way (the
// acknowledgements ride on the data). It only matters with Cores set.
// 0 (unset) is 1: the same work. cmd/bench -calibrate fits it with the
// cores bound.
//
// CacheWork and CacheWorkBytes, where set, are the cores bound's work of
// a collective of at most CacheWorkBytes bytes per rank (its buffer), as
// a fraction of its work priced at β and γ: while a collective's buffers
// fit the caches, a core moves and reduces each of its bytes for less
// (over loopback tcp on the 2-core VM: 0.77 up to 16 MiB; refitted with
// it, the calibration's rms error fell from 14% to 9% and each of five
// out-of-sample sets gained 1–7 of 45 cells, docs/scaling.md). It only
// matters with Cores set;
// the simulator applies it alike (sim.Config.CacheWork, keyed on the
// largest collective between two alignments). 0 (unset): no regime.
//
// LoneAlpha, where set, is the α of a lone send as a fraction of its
// link's α: a lone send is a message sent in a step in which its sender
// receives nothing (transport Send, not Exchange): Tree's rounds that
// only send, every send of the binomial Broadcast and Reduce, a chain's
// first rank, the fold and unfold of doubling and halving-doubling. The
// steps of the ring, doubling and halving-doubling, and the agreement
// step, are exchanges and keep α. On a host whose ranks outnumber its
// cores a lone send is seen sooner than an exchange's message: fewer
// ranks want the cores at that moment (over loopback tcp on 2 cores, 4
// ranks: a chain's hops took 8–11 µs against the 16.7 µs α fitted on
// all-reduce steps; fitted, 0.7). 0 (unset) is 1. cmd/bench -calibrate
// fits it.
type Model struct {
	Intra   Link    `json:"intra"`
	Inter   Link    `json:"inter"`
	Gamma   float64 `json:"gamma_s_per_byte"`
	Ports   int     `json:"ports,omitempty"`
	Segment int     `json:"segment_bytes,omitempty"`
	NICs    int     `json:"nics,omitempty"`
	Cores   int     `json:"cores,omitempty"`

	ExchangeWork float64 `json:"exchange_work,omitempty"`
	LoneAlpha    float64 `json:"lone_alpha,omitempty"`

	CacheWork      float64 `json:"cache_work,omitempty"`
	CacheWorkBytes int     `json:"cache_work_bytes,omitempty"`
}

// alpha is the α of a message over l: LoneAlpha of it for a lone send
// (see Model).
func (m Model) alpha(l Link, lone bool) float64 {
	if lone && m.LoneAlpha > 0 {
		return m.LoneAlpha * l.Alpha
	}
	return l.Alpha
}

// Validate reports a model with a negative, infinite or NaN parameter.
func (m Model) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{
		{"intra.alpha_s", m.Intra.Alpha}, {"intra.beta_s_per_byte", m.Intra.Beta},
		{"inter.alpha_s", m.Inter.Alpha}, {"inter.beta_s_per_byte", m.Inter.Beta},
		{"intra.cache_beta_s_per_byte", m.Intra.CacheBeta}, {"inter.cache_beta_s_per_byte", m.Inter.CacheBeta},
		{"intra.cache_bytes", float64(m.Intra.CacheBytes)}, {"inter.cache_bytes", float64(m.Inter.CacheBytes)},
		{"intra.small_beta_s_per_byte", m.Intra.SmallBeta}, {"inter.small_beta_s_per_byte", m.Inter.SmallBeta},
		{"intra.small_bytes", float64(m.Intra.SmallBytes)}, {"inter.small_bytes", float64(m.Inter.SmallBytes)},
		{"gamma_s_per_byte", m.Gamma}, {"exchange_work", m.ExchangeWork}, {"lone_alpha", m.LoneAlpha},
		{"cache_work", m.CacheWork}, {"cache_work_bytes", float64(m.CacheWorkBytes)},
	} {
		if p.v < 0 || math.IsInf(p.v, 0) || math.IsNaN(p.v) {
			return fmt.Errorf("%w: cost model %s = %v: must be a finite number ≥ 0", ErrInvalid, p.name, p.v)
		}
	}
	if m.Ports < 0 {
		return fmt.Errorf("%w: cost model ports = %d: must be ≥ 0", ErrInvalid, m.Ports)
	}
	if m.NICs < 0 {
		return fmt.Errorf("%w: cost model nics = %d: must be ≥ 0 (0: a link per rank)", ErrInvalid, m.NICs)
	}
	if m.Cores < 0 {
		return fmt.Errorf("%w: cost model cores = %d: must be ≥ 0 (0: no cores bound)", ErrInvalid, m.Cores)
	}
	if m.Segment < 0 {
		return fmt.Errorf("%w: cost model segment_bytes = %d: must be ≥ 0 (0: exchanges go whole)", ErrInvalid, m.Segment)
	}
	return nil
}

// shared is l as one of k messages that leave through one NIC at once
// (time).
func (l Link) shared(k float64) Link {
	l.share = max(l.share, 1) * k
	return l
}

// queuedTransfer is the per-byte part of a message of b bytes sent
// alone, with the messages that share its NIC ahead of it (Link.shared):
// transfer times the share.
func (l Link) queuedTransfer(b float64) float64 { return l.transfer(b) * max(l.share, 1) }

// nicOf is the NIC of rank r on shape s whose nodes share NICs NICs
// (local rank i on NIC i mod NICs of its node, as the simulator's), an
// index over every node's NICs.
func (m Model) nicOf(s Shape, r int) int {
	return (r/s.LocalSize)*m.NICs + (r%s.LocalSize)%m.NICs
}

// nicShare is how many messages share one NIC when crossing ranks of a
// node each send one between nodes at once: ⌈crossing/NICs⌉, 1 with a
// link per rank (NICs 0).
func (m Model) nicShare(crossing int) float64 {
	if m.NICs <= 0 || crossing <= 1 {
		return 1
	}
	return math.Ceil(float64(crossing) / float64(m.NICs))
}

// sharedBy is m for the inter-node all-reduces that l ranks of every node
// run side by side (torus, mesh): the inter-node link shared ⌈l/NICs⌉
// ways, and no NICs left to share within each of them.
func (m Model) sharedBy(l int) Model {
	if k := m.nicShare(l); k > 1 {
		m.Inter = m.Inter.shared(k)
	}
	m.NICs = 0
	return m
}

// pieces is how many lock-step exchanges an exchange of x bytes takes
// under m (Segment): ⌈x/Segment⌉, at least 1.
func (m Model) pieces(x float64) float64 {
	if m.Segment <= 0 || x <= float64(m.Segment) {
		return 1
	}
	return math.Ceil(x / float64(m.Segment))
}

// oneWay is the time of a message of x bytes sent alone over l (a lone
// send: its α is LoneAlpha's), as its pieces (pieces) back to back, from
// the send's start to the end of its receive: α + k·x/k·β copied (β times
// the messages sharing its NIC, Link.shared); reduced, each piece is
// reduced as it lands, so the reduction overlaps the next piece's
// transfer: α + t(p) + (k−1)·max(t(p), p·γ) + p·γ with p = x/k, t the
// per-byte part.
func (m Model) oneWay(l Link, x float64, reduce bool) float64 {
	k := m.pieces(x)
	p := x / k
	tx := l.queuedTransfer(p)
	a := m.alpha(l, true)
	if !reduce {
		return a + k*tx
	}
	return a + tx + (k-1)*math.Max(tx, p*m.Gamma) + p*m.Gamma
}

// maxSegment is the largest segment a pipelined schedule may use under m:
// limit, or Segment when that is smaller.
func (m Model) maxSegment(limit int) int {
	if m.Segment > 0 {
		return min(limit, m.Segment)
	}
	return limit
}

// DefaultModel is the model a Group uses when none is given (WithModel):
// for ranks that share memory, this project's in-process transport, and
// for the others its tcp transport over loopback, both as `cmd/bench
// -calibrate -ranks 4` measured them on a 2-core VM (the profiles in
// testdata/profiles, rounded; tcp-4's, of its 23:41 calibration with the
// connections on reno, fitted without the cores bound, which that profile
// has: a default cannot know the host's cores, and every rank must use
// the same model). Calibrate on the machine at hand
// for better choices.
func DefaultModel(peerMemory bool) Model {
	return DefaultModelFor(Shape{PeerMemory: peerMemory})
}

// DefaultModelFor is the default model for a group of shape s: ranks in
// one address space (PeerMemory, no LendLimit), ranks of one host that
// lend copies in shared memory (shm: PeerMemory with a LendLimit, as
// testdata/profiles/shm-4.json measured it, rounded), or ranks that only
// exchange messages (DefaultModel(false)).
func DefaultModelFor(s Shape) Model {
	if s.PeerMemory && s.LendLimit > 0 {
		l := Link{Alpha: 1.99e-6, Beta: 1 / 2.00e9, CacheBeta: 1 / 3.36e9, CacheBytes: 8 << 20, SmallBeta: 1 / 5.19e9, SmallBytes: 512 << 10}
		return Model{Intra: l, Inter: l, Gamma: 1 / 29.0e9, Ports: 2, LoneAlpha: 0.841}
	}
	if s.PeerMemory {
		l := Link{Alpha: 4.44e-6, Beta: 1 / 4.89e9, CacheBeta: 1 / 9.78e9, CacheBytes: 8 << 20, SmallBeta: 1 / 30.2e9, SmallBytes: 256 << 10}
		return Model{Intra: l, Inter: l, Gamma: 1 / 7.89e9, Ports: 2, LoneAlpha: 0.595}
	}
	l := Link{Alpha: 18.26e-6, Beta: 1 / 2.115e9, CacheBeta: 1 / 2.742e9, CacheBytes: 128 << 10, SmallBeta: 1 / 3.261e9, SmallBytes: 32 << 10}
	return Model{Intra: l, Inter: l, Gamma: 1 / 8.781e9, Ports: 2, Segment: TCPSegmentBytes, LoneAlpha: 0.595}
}

// TCPSegmentBytes is the default model's Segment for ranks that only
// exchange messages: on loopback tcp, 256 KiB pieces sent in lock step
// were read while still cached, where whole messages of a few MiB were
// not (pieces.go).
const TCPSegmentBytes = 256 << 10

// WithModel sets the cost model Auto chooses by (DefaultModel otherwise).
// Every rank must use the same model: Auto's choice is made on each rank
// from the model and the group's shape, and ranks that choose differently
// fail with a mismatch.
func WithModel(m Model) GroupOption {
	return func(g *Group) { g.model, g.modelSet = m, true }
}

// Shape is what a collective's cost depends on besides the model and the
// bytes: the ranks, how they sit on nodes, and what the transport offers.
type Shape struct {
	Ranks int
	// Nodes is the number of nodes, 1 when the topology is unknown;
	// LocalSize the largest node's number of ranks, SmallestNode the
	// smallest's (0: as LocalSize, even nodes).
	Nodes, LocalSize int
	SmallestNode     int
	// Topology: every rank knows its node (algorithms that need it can
	// run).
	Topology bool
	// PeerMemory: the ranks can read one another's buffers
	// (transport.PeerMemory), in place when LendLimit is 0 (ranks in one
	// address space), else as copies of at most LendLimit bytes lent in
	// shared memory (shm): the direct algorithm then runs segment by
	// segment, and its cost counts the copies and a wait per segment.
	PeerMemory bool
	LendLimit  int
}

// FlatShape is the shape of n ranks on one node.
func FlatShape(n int) Shape { return Shape{Ranks: n, Nodes: 1, LocalSize: n} }

// NodesShape is the shape of n ranks on nodes of localSize consecutive
// ranks (the last node smaller when localSize does not divide n).
func NodesShape(n, localSize int) Shape {
	if localSize <= 0 || localSize >= n {
		return Shape{Ranks: n, Nodes: 1, LocalSize: n, Topology: localSize > 0}
	}
	nodes := (n + localSize - 1) / localSize
	return Shape{Ranks: n, Nodes: nodes, LocalSize: localSize, SmallestNode: n - (nodes-1)*localSize, Topology: true}
}

// slotsPerRank is the most slots (hierarchy.go) a rank holds: ⌈L/L_min⌉
// on the smallest node, 1 on even nodes. Torus and mesh run that many
// inter-node all-reduces one after another there.
func (s Shape) slotsPerRank() int {
	if s.SmallestNode <= 0 || s.SmallestNode >= s.LocalSize {
		return 1
	}
	return (s.LocalSize + s.SmallestNode - 1) / s.SmallestNode
}

// smallestShape is the shape of the ranks of the smallest node.
func (s Shape) smallestShape() Shape {
	l := s.SmallestNode
	if l <= 0 {
		l = s.LocalSize
	}
	return Shape{Ranks: l, Nodes: 1, LocalSize: l}
}

// link is the link a topology-blind algorithm pays on every step: the
// inter-node one once the group spans several nodes.
func (m Model) link(s Shape) Link {
	if s.Nodes > 1 {
		return m.Inter
	}
	return m.Intra
}

// between is the link between ranks a and b of shape s, whose nodes are
// blocks of LocalSize consecutive ranks (as the simulator and
// inproc.WithLocalSize place them).
func (m Model) between(s Shape, a, b int) Link {
	if s.Nodes > 1 && s.LocalSize > 0 && a/s.LocalSize != b/s.LocalSize {
		return m.Inter
	}
	return m.Intra
}

// Prediction is one algorithm's predicted time for one call.
type Prediction struct {
	Algorithm Algorithm
	Seconds   float64
}

// runsOn says whether algorithm a can run on a group of shape s.
func (s algorithmSpec) runsOn(sh Shape) bool {
	if s.cost == nil {
		return false
	}
	if s.needs&needsPeerMemory != 0 && !sh.PeerMemory {
		return false
	}
	if s.needs&needsTopology != 0 && !sh.Topology {
		return false
	}
	return true
}

// Predict is the predicted time of an AllReduce of the given bytes on a
// group of shape s under model m, for every algorithm that can run there
// (in table order, Auto left out).
func Predict(m Model, s Shape, bytes int) []Prediction {
	var out []Prediction
	for _, a := range Algorithms() {
		sp, _ := a.spec()
		if a == Auto || !sp.runsOn(s) {
			continue
		}
		out = append(out, Prediction{a, sp.predict(m, s, float64(max(bytes, 0)))})
	}
	return out
}

// PredictAlgorithm is algorithm a's predicted time for an AllReduce of
// the given bytes on a group of shape s under model m, as Predict gives
// it; ok is false when a cannot run there (or is Auto).
func PredictAlgorithm(m Model, s Shape, a Algorithm, bytes int) (seconds float64, ok bool) {
	sp, known := a.spec()
	if !known || a == Auto || !sp.runsOn(s) {
		return 0, false
	}
	return sp.predict(m, s, float64(max(bytes, 0))), true
}

// Choose is Auto's pick for an AllReduce of the given bytes on a group of
// shape s under model m: the algorithm of least predicted time that can
// run there. On a tie (within a relative 1e-9: the formulas add the same
// terms in different orders) the one with fewer latency steps wins (its
// time with only α, messages whole: latencySteps), then the earlier in
// table order. Ties are real: with every message in pieces of one size,
// the ring and halving-doubling send as many pieces of as many bytes; but
// a rank of halving-doubling waits on one partner at a time, 2·log2 N
// times, and a ring rank on its left neighbour, which waits on its own, 2(N-1)
// times, so every rank's delays reach every other: on 4 tcp processes hd
// measured 0.71-0.80x the ring's time at 4-64 MiB. A group of one rank
// takes the ring, which returns at once.
//
// With Model.Cores, algorithms that move the same bytes tie at the cores
// bound of their equal work (cores.go); the tie then goes first to the
// shorter schedule, the one whose time without the bound is less, and
// only then to fewer latency steps.
func Choose(m Model, s Shape, bytes int) Algorithm {
	best, bestT := Ring, math.Inf(1)
	var bestKey *tieKey // best's, worked out when a tie needs it
	for _, p := range Predict(m, s, bytes) {
		switch {
		case p.Seconds < bestT*(1-1e-9):
			best, bestT, bestKey = p.Algorithm, p.Seconds, nil
		case p.Seconds <= bestT*(1+1e-9):
			if bestKey == nil {
				bestKey = newTieKey(m, s, best, bytes)
			}
			if k := newTieKey(m, s, p.Algorithm, bytes); k.less(bestKey) {
				best, bestT, bestKey = p.Algorithm, min(bestT, p.Seconds), k
			}
		}
	}
	return best
}

// tieKey orders algorithms whose predictions tie: by the schedule's time
// without the cores bound (where the model has one), then by latency
// steps.
type tieKey struct{ schedule, steps float64 }

// newTieKey is algorithm a's tie-break key for bytes on shape s under m.
func newTieKey(m Model, s Shape, a Algorithm, bytes int) *tieKey {
	k := &tieKey{steps: latencySteps(m, s, a, bytes)}
	if m.Cores > 0 {
		sp, _ := a.spec()
		k.schedule = sp.cost(m, s, float64(max(bytes, 0)))
	}
	return k
}

// less reports whether k wins a tie against o: a shorter schedule (by
// more than rounding), else fewer latency steps.
func (k *tieKey) less(o *tieKey) bool {
	switch {
	case k.schedule < o.schedule*(1-1e-9):
		return true
	case o.schedule < k.schedule*(1-1e-9):
		return false
	}
	return k.steps < o.steps
}

// latencySteps is algorithm a's predicted time with the links' α alone
// (no per-byte cost, no reduction) and messages whole: its latency steps
// on the critical path, in units of α; Choose's tie-break.
func latencySteps(m Model, s Shape, a Algorithm, bytes int) float64 {
	lat := Model{Intra: Link{Alpha: m.Intra.Alpha}, Inter: Link{Alpha: m.Inter.Alpha}, Ports: m.Ports}
	t, _ := PredictAlgorithm(lat, s, a, bytes)
	return t
}

// sizeClass is the index of Auto's cache entry for a call of b bytes:
// classes are powers of two, [2^(k-1), 2^k) for k ≥ 1 and 0 for 0 bytes,
// and each is chosen at its lower end, so calls of power-of-two sizes get
// exactly the model's argmin.
func sizeClass(b int) int { return bits.Len(uint(b)) }

// classBytes is the size Auto chooses class k's algorithm at.
func classBytes(k int) int {
	if k == 0 {
		return 0
	}
	return 1 << (k - 1)
}

// log2ceil is ⌈log2 n⌉ for n ≥ 1.
func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

// floorPow2 is the largest power of two ≤ n, for n ≥ 1.
func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

// agreeCost is the agreement step (agree.go): one 0-byte exchange with
// the ring neighbours.
func agreeCost(m Model, s Shape) float64 {
	if s.Ranks == 1 {
		return 0
	}
	return m.link(s).Alpha
}
