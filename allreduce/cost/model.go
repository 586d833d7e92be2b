package cost

import (
	"errors"
	"fmt"
	"math"
)

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
//     that follow them in its program (the link model of the package doc).
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
// follow it (allreduce's dtree.go; Binomial, Chain); and the fold of doubling and
// halving-doubling on a number of ranks that is not a power of two, whose
// formula counts each send as Ports 0 does (an upper bound, checked
// against the simulator by allreduce's TestCostMatchesSimulator). Ring,
// doubling and halving-doubling exchange one message each way per step and take the same time whatever Ports is.
// A profile fits it to its algorithms' measured times (cmd/bench
// -calibrate).
//
// Segment, where set, is the largest message sent at once: the schedules
// cut larger messages into pieces of at most Segment bytes, exchanged in
// lock step (allreduce's pieces.go), and the formulas count them so, an exchange of x
// bytes as k = ⌈x/Segment⌉ exchanges of x/k (each in the size regime of
// x/k), a message alone as its pieces back to back (OneWay). It is a
// property of the transport, not fitted: 256 KiB over tcp
// (DefaultModelFor), none in process or over shared memory, where a
// message is one memory copy whatever its size. Tree keeps its segments
// at most Segment. Every rank must have the same Segment (as the same model), or their pieces differ
// and the collective fails with a mismatch.
//
// NICs, where set, is how many NICs the ranks of a node share for their
// inter-node messages (as the simulator's): a NIC
// carries one message at a time, so when c ranks of a node send between
// nodes at once, each of the ⌈c/NICs⌉ messages on a NIC costs the
// inter-node per-byte time that many times over (the last of them
// arrives that much later). The formulas count it: doubling's and
// halving-doubling's steps give each message between nodes its NIC's
// slot, as the simulator does; Tree's rounds place each such send in its
// NIC's earliest gap; torus and mesh, whose L
// ranks of a node run their inter-node all-reduces side by side, price
// them as one over a link shared ⌈L/NICs⌉ ways (Link.Shared, SharedBy).
// The ring and hierarchical send between nodes from one rank per node at
// a time and share nothing. 0 (unset): a link per rank, nothing shared.
// cmd/bench -calibrate leaves it 0 (one host has no NIC between nodes).
//
// Cores, where set, is how many cores the ranks of a node share for the
// work of moving and reducing bytes: every prediction is at least the
// busiest node's work divided by Cores (Bounded), which binds when ranks
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
// (docs/measurements.md gives the measurements). It only matters with Cores
// set; the simulator applies it alike (keyed on the largest collective
// between two alignments). 0 (unset): no regime.
//
// LoneAlpha, where set, is the α of a lone send as a fraction of its
// link's α: a lone send is a message sent in a step in which its sender
// receives nothing (transport Send, not Exchange): Tree's rounds that
// only send, every send of the binomial Broadcast and Reduce, a chain's
// first rank, the fold and unfold of doubling and halving-doubling. The
// steps of the ring, doubling and halving-doubling, and the agreement
// step, are exchanges and keep α. On a host whose ranks outnumber its
// cores a lone send is seen sooner than an exchange's message: fewer
// ranks want the cores at that moment (docs/measurements.md). 0 (unset)
// is 1. cmd/bench -calibrate fits it.
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

// AlphaOf is the α of a message over l: LoneAlpha of it for a lone send
// (see Model).
func (m Model) AlphaOf(l Link, lone bool) float64 {
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

// NICOf is the NIC of rank r on shape s whose nodes share NICs NICs
// (local rank i on NIC i mod NICs of its node, as the simulator's), an
// index over every node's NICs.
func (m Model) NICOf(s Shape, r int) int {
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

// SharedBy is m for the inter-node all-reduces that l ranks of every node
// run side by side (torus, mesh): the inter-node link shared ⌈l/NICs⌉
// ways, and no NICs left to share within each of them.
func (m Model) SharedBy(l int) Model {
	if k := m.nicShare(l); k > 1 {
		m.Inter = m.Inter.Shared(k)
	}
	m.NICs = 0
	return m
}

// Pieces is how many lock-step exchanges an exchange of x bytes takes
// under m (Segment): ⌈x/Segment⌉, at least 1.
func (m Model) Pieces(x float64) float64 {
	if m.Segment <= 0 || x <= float64(m.Segment) {
		return 1
	}
	return math.Ceil(x / float64(m.Segment))
}

// OneWay is the time of a message of x bytes sent alone over l (a lone
// send: its α is LoneAlpha's), as its pieces (pieces) back to back, from
// the send's start to the end of its receive: α + k·x/k·β copied (β times
// the messages sharing its NIC, Link.shared); reduced, each piece is
// reduced as it lands, so the reduction overlaps the next piece's
// transfer: α + t(p) + (k−1)·max(t(p), p·γ) + p·γ with p = x/k, t the
// per-byte part.
func (m Model) OneWay(l Link, x float64, reduce bool) float64 {
	k := m.Pieces(x)
	p := x / k
	tx := l.QueuedTransfer(p)
	a := m.AlphaOf(l, true)
	if !reduce {
		return a + k*tx
	}
	return a + tx + (k-1)*math.Max(tx, p*m.Gamma) + p*m.Gamma
}

// MaxSegment is the largest segment a pipelined schedule may use under m:
// limit, or Segment when that is smaller.
func (m Model) MaxSegment(limit int) int {
	if m.Segment > 0 {
		return min(limit, m.Segment)
	}
	return limit
}

// Agree is the time of allreduce's agreement step: one 0-byte exchange with
// the ring neighbours.
func (m Model) Agree(s Shape) float64 {
	if s.Ranks == 1 {
		return 0
	}
	return m.LinkOf(s).Alpha
}

// ErrInvalid is the error of a model with a parameter out of range
// (Model.Validate) and of a profile that is not one (ReadProfile).
var ErrInvalid = errors.New("invalid cost model")
