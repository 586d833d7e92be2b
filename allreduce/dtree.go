package allreduce

import (
	"context"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Double binary tree AllReduce (Tree, "tree"), NCCL's tree algorithm:
// O(log N) latency at any N, for small and medium buffers and many ranks.
//
// Trees. Tree 0 is NCCL's in-order binary tree over the ranks (btree
// below): the rank whose lowest set bit is b has children r-b/2 and r+b/2
// (the second moved down to r+b/4, r+b/8, ... while it is ≥ N), so the odd
// ranks are its leaves; rank 0 is the root and has one child, the largest
// power of two below N. Tree 1 is the same tree over relabelled ranks:
// mirrored (rank r plays N-1-r) when N is even, shifted (rank r plays
// r-1 mod N) when N is odd, so the leaves of one tree are (nearly all) the
// interior ranks of the other and every rank's links carry about the same
// load.
//
// Data. Tree t reduces half t of the buffer (ChunkBounds(count, 2, t)) up
// to its root and broadcasts it back down. Each half is cut into S nearly
// equal segments of at most the segment size (256 KiB, treeSegmentBytes,
// or the model's Segment when smaller),
// so a rank reduces segment k+1 from its children while it sends segment k
// to its parent, and forwards segment k down while it receives k+1.
//
// Schedule. Messages are placed in rounds ρ = phase·4Q + 4q + slot: Q is
// the number of periods q of one phase, and a message of tree t between a
// parent and its child j (0: the lower label, 1: the higher) has slot
// 2t + j. Every rank runs its messages in round order, each round as one
// step primitive: at most one send and one receive.
// A rank's level L_t is log2 of its lowest set bit in tree t's labels (the
// root's: the bit length of N-1), larger than its children's.
//
//   - up (phase 0): the rank of level L sends segment k to its parent in
//     period k+L; so a parent has every child's segment k (periods ≤ k+L-1)
//     before it sends its own.
//   - down (phase 1): with D = L_root - L, the rank at depth D sends
//     segment k to its children in period k+D, after its parent's send in
//     period k+D_parent ≤ k+D-1.
//
// Every message of round ρ is received in round ρ, so if every rank has
// finished the rounds before ρ, every rank finishes ρ: no order of events
// deadlocks, on a transport whose sends wait for the receiver either. The
// message's step number is its round, so both sides of an exchange use
// one, and a message of another round is a mismatch. An agreement step
// (agree.go) runs first: a tree's first messages do not cross between ring
// neighbours, which is where a rank calling another collective sends.
//
// Steps and bytes for a buffer of M bytes on N ranks, each half in S
// segments: the agreement step, then 8(S+⌈log2 N⌉) rounds, in which a rank
// takes part only where it has a message. The latency of one segment is
// the depth, up and down: about 4⌈log2 N⌉ message times (an interior rank
// takes its children's segments, and sends them theirs, one after the
// other), against the ring's 2(N-1); each further segment adds about 4. A
// rank has at most 4 tree links in all (TestTreeShape checks every N up
// to 80) and each
// carries its tree's half once each way: at most 2M bytes sent and 2M
// received per rank, against the ring's 2(N-1)/N·M.
//
// Exactness: every value is reduced once, at its tree's root, and copied
// down unchanged; on the way up each rank combines its own operand with
// each child's partial result, the lower rank's operand first, children in
// a fixed order. So every rank ends bitwise identical whatever the values,
// and the same run to run. Avg divides by N once, at the root.

// treeSegmentBytes is Tree's default segment size.
const treeSegmentBytes = 256 << 10

// btree is rank r's place in NCCL's in-order binary tree of n ranks
// (ncclGetBtree): its parent (-1 at the root), its children (-1 where
// there is none), which child of its parent it is (0: the lower, 1: the
// higher) and its level (log2 of its lowest set bit; the root's is the
// bit length of n-1).
func btree(n, r int) (parent int, child [2]int, side, level int) {
	child = [2]int{-1, -1}
	if r == 0 {
		top := bits.Len(uint(n - 1)) // 2^top ≥ n
		if n > 1 {
			child[1] = 1 << (top - 1)
		}
		return -1, child, 0, top
	}
	bit := r & -r
	parent = (r ^ bit) | bit<<1
	if parent >= n {
		parent = r ^ bit
	}
	if r > parent {
		side = 1
	}
	if low := bit >> 1; low > 0 {
		child[0] = r - low
		for ; low > 0; low >>= 1 {
			if r+low < n {
				child[1] = r + low
				break
			}
		}
	}
	return parent, child, side, bits.TrailingZeros(uint(bit))
}

// treeNode is one rank's place in one tree of the double binary tree,
// with its neighbours' levels (the schedule needs them).
type treeNode struct {
	parent      int    // -1 at the root
	child       [2]int // -1: none
	side        int    // which child of its parent this rank is
	level       int
	parentLevel int
	childLevel  [2]int
}

// dtreeNode is rank r's node in tree t (0 or 1) of the double binary tree
// of n ranks.
func dtreeNode(n, r, t int) treeNode {
	label, rank := func(r int) int { return r }, func(v int) int { return v }
	if t == 1 {
		if n%2 == 1 {
			label = func(r int) int { return mod(r-1, n) }
			rank = func(v int) int { return mod(v+1, n) }
		} else {
			label = func(r int) int { return n - 1 - r }
			rank = func(v int) int { return n - 1 - v }
		}
	}
	p, ch, side, level := btree(n, label(r))
	nd := treeNode{parent: -1, child: [2]int{-1, -1}, side: side, level: level}
	if p >= 0 {
		_, _, _, nd.parentLevel = btree(n, p)
		nd.parent = rank(p)
	}
	for j, c := range ch {
		if c >= 0 {
			_, _, _, nd.childLevel[j] = btree(n, c)
			nd.child[j] = rank(c)
		}
	}
	return nd
}

// dtreeAllReduce is Tree.
func (g *Group) dtreeAllReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n, r := g.size, g.rank
	if n == 1 {
		return nil
	}
	if err := g.agree(ctx, h); err != nil || c.count == 0 {
		return err
	}
	es := c.dt.Size()
	segElems := max(1, orDefault(g.tune.treeSegment, g.model.MaxSegment(treeSegmentBytes))/es)
	var (
		nodes  [2]treeNode
		halves [2][]byte // tree t's half of the buffer
		counts [2]int    // its elements
		segs   [2]int    // its segments
	)
	for t := range nodes {
		nodes[t] = dtreeNode(n, r, t)
		lo, hi := ChunkBounds(c.count, 2, t)
		halves[t], counts[t] = c.buf[lo*es:hi*es], hi-lo
		segs[t] = (counts[t] + segElems - 1) / segElems
	}
	// segment k of tree t.
	seg := func(t, k int) []byte {
		lo, hi := ChunkBounds(counts[t], segs[t], k)
		return halves[t][lo*es : hi*es]
	}
	top := bits.Len(uint(n - 1)) // the roots' level
	periods := max(segs[0], segs[1]) + top
	for phase := 0; phase < 2; phase++ {
		for q := 0; q < periods; q++ {
			for slot := 0; slot < 4; slot++ {
				t, j := slot>>1, slot&1
				nd := &nodes[t]
				step := uint32((phase*periods+q)*4 + slot)
				to, from := -1, -1
				var send, recv []byte
				if phase == 0 {
					// Up: send my segment q-L to my parent if I am its
					// child j; take segment q-L_c from child j.
					if k := q - nd.level; nd.parent >= 0 && nd.side == j && k >= 0 && k < segs[t] {
						to, send = nd.parent, seg(t, k)
					}
					if k := q - nd.childLevel[j]; nd.child[j] >= 0 && k >= 0 && k < segs[t] {
						from, recv = nd.child[j], seg(t, k)
					}
				} else {
					// Down: take segment q-D_parent from my parent if I am
					// its child j; send segment q-D to child j.
					if k := q - (top - nd.parentLevel); nd.parent >= 0 && nd.side == j && k >= 0 && k < segs[t] {
						from, recv = nd.parent, seg(t, k)
					}
					if k := q - (top - nd.level); nd.child[j] >= 0 && k >= 0 && k < segs[t] {
						to, send = nd.child[j], seg(t, k)
					}
				}
				if err := g.dtreeStep(ctx, h, step, phase == 0, to, send, from, recv); err != nil {
					return err
				}
			}
		}
		if phase == 0 && c.op == Avg {
			for t := range nodes {
				if nodes[t].parent < 0 {
					g.divide(c.dt, halves[t], n)
				}
			}
		}
	}
	return nil
}

// dtreeStep runs one round of Tree on this rank: send to rank to (if ≥ 0)
// while receiving from rank from (if ≥ 0) into recv, reducing on the way
// up (the lower rank's operand first) and copying on the way down.
func (g *Group) dtreeStep(ctx context.Context, h transport.Header, step uint32, up bool, to int, send []byte, from int, recv []byte) error {
	order := localFirst
	if from < g.rank {
		order = receivedFirst
	}
	switch {
	case to < 0 && from < 0:
		return nil
	case from < 0:
		return g.send(ctx, h, step, to, send)
	case to < 0 && up:
		return g.recvReduce(ctx, h, step, from, recv, recv, order)
	case to < 0:
		return g.recvCopy(ctx, h, step, from, recv)
	case up:
		return g.sendRecvReduce(ctx, h, step, to, send, from, recv, recv, order)
	default:
		return g.sendRecvCopy(ctx, h, step, to, send, from, recv)
	}
}

// treeCost is Tree's predicted time.
//
// Steps and bytes on the wire, for M bytes on N ranks, each half in S
// segments of c = M/(2S) bytes (c ≤ 256 KiB): the agreement step (a
// 0-byte message to the right neighbour), then 8(S + ⌈log2 N⌉) rounds, in
// each of which a rank sends at most one segment and receives at most
// one. Up, each non-root rank of a tree sends each segment of its tree's
// half to its parent once (the parent reduces it); down, each sends it to
// each of its children once. So every tree edge carries M/2 once each
// way, the group puts 2(N−1)·M bytes on the wire (the ring's total), and
// a rank sends at most 2M bytes (an interior rank: M/2 up and M down in
// its interior tree, M/2 up in the other), to at most 4 peers.
//
// Its rounds interleave two trees, two children each, and a rank's round
// waits for its rounds before, so the critical path has no simple closed
// form: like pairStepsCost, treeCost follows every rank's clock through
// the schedule's rounds under the link model; per round, for a rank that
// sends a segment to p and receives one from q:
//
//	send:    start = its clock (Ports 0), or the latest of its clock,
//	         its first free port and its link to p (Ports ≥ 1);
//	         arrival at p = start + α + c·β (α times Model.LoneAlpha
//	         in a round in which the rank receives nothing: a lone
//	         send); the rank is free again at
//	         start + c·β (Ports 0: the send holds it) or at start (the
//	         port carries the segment)
//	receive: max(its clock, q's arrival) + c·γ on the way up (reducing),
//	         + 0 on the way down (copying)
//
// and its clock becomes the later of the two, α and β those of the link
// between the two ranks (intra- or inter-node). This is what the
// simulator does with the same schedule, to rounding
// (TestCostMatchesSimulator); O(N·(S + log N)).
//
// What it comes to (α, β, γ each alone; N = 4…64): the first segment
// costs about (2⌈log2 N⌉ + 2) α, (3⌈log2 N⌉ + 1) c·β and (2⌈log2 N⌉ + 1) c·γ
// with Ports 0; with Ports ≥ 2, whose sends to a parent and a child
// travel at once, (2⌈log2 N⌉ + 1) c·β. Each further segment (one per
// tree) adds 5 to 7 α, 5 to 7 c·β and 4 c·γ, whatever Ports is: the
// pipeline's throughput is set by the rounds' order (an interior rank
// takes its two children's segments of one tree before it sends its own
// of the other, which its parent there takes before its own children's),
// not by the sender's port.
func treeCost(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 {
		return 0
	}
	if b == 0 {
		return m.Agree(s)
	}
	fsegs, c := treeSegments(m, b)
	segs := int(fsegs)
	top := bits.Len(uint(n - 1))
	periods := segs + top
	nodes := make([][2]treeNode, n)
	clock := make([]float64, n)
	for r := range nodes {
		nodes[r] = [2]treeNode{dtreeNode(n, r, 0), dtreeNode(n, r, 1)}
		clock[r] = m.Between(s, mod(r-1, n), r).Alpha // the agreement step
	}
	tp := newTreePorts(n, m.Ports)
	arrival := make([]float64, n) // of the segment rank r sends this round
	sent := make([]float64, n)    // when rank r is free of its send
	to, from := make([]int, n), make([]int, n)
	nics := newRoundNICs(m, s)
	for phase := 0; phase < 2; phase++ {
		for q := 0; q < periods; q++ {
			for slot := 0; slot < 4; slot++ {
				t, j := slot>>1, slot&1
				any := false
				for r := range nodes {
					to[r], from[r] = treeRound(&nodes[r][t], phase, q, j, top, segs)
					if p := to[r]; p >= 0 {
						any = true
						l := m.Between(s, r, p)
						tx := l.QueuedTransfer(c)
						start, free := tp.post(r, p, clock[r], tx, nics)
						sent[r] = free
						arrival[r] = start + m.AlphaOf(l, from[r] < 0) + tx // a round that only sends: a lone send
					}
				}
				if !any {
					continue
				}
				if nics != nil && slot == 3 {
					nics.forget(slices.Min(clock))
				}
				for r := range nodes {
					if to[r] < 0 && from[r] < 0 {
						continue
					}
					end := 0.0
					if to[r] >= 0 {
						end = sent[r]
					}
					if p := from[r]; p >= 0 {
						got := math.Max(clock[r], arrival[p])
						if phase == 0 {
							got += c * m.Gamma
						}
						end = math.Max(end, got)
					}
					clock[r] = end
				}
			}
		}
	}
	end := 0.0
	for _, x := range clock {
		end = math.Max(end, x)
	}
	return end
}

// treeRound is whom a rank at node nd of its tree sends to and receives
// from (-1: none) in slot j of period q of phase 0 (up: segments to the
// parent, reduced there) or 1 (down: from the parent to the children).
func treeRound(nd *treeNode, phase, q, j, top, segs int) (to, from int) {
	to, from = -1, -1
	if phase == 0 {
		if k := q - nd.level; nd.parent >= 0 && nd.side == j && k >= 0 && k < segs {
			to = nd.parent
		}
		if k := q - nd.childLevel[j]; nd.child[j] >= 0 && k >= 0 && k < segs {
			from = nd.child[j]
		}
		return to, from
	}
	if k := q - (top - nd.parentLevel); nd.parent >= 0 && nd.side == j && k >= 0 && k < segs {
		from = nd.parent
	}
	if k := q - (top - nd.level); nd.child[j] >= 0 && k >= 0 && k < segs {
		to = nd.child[j]
	}
	return to, from
}

// treePorts are, with Ports ≥ 1, the times each rank's ports and its
// links (by peer; a rank has at most 6 tree links) are busy until; nil
// with Ports 0.
type treePorts struct {
	portFree [][]float64
	linkFree [][]linkBusy
}

type linkBusy struct {
	peer int
	free float64
}

func newTreePorts(n, ports int) *treePorts {
	if ports <= 0 {
		return nil
	}
	tp := &treePorts{portFree: make([][]float64, n), linkFree: make([][]linkBusy, n)}
	for r := range tp.portFree {
		tp.portFree[r] = make([]float64, ports)
	}
	return tp
}

// post is when rank r's segment to p, taking tx on the wire, starts (its
// clock at the latest; with ports, also its first free port and its link
// to p; between nodes, its NIC's slot), and when r is free of it (Ports
// 0: the send holds it; else when it was ready).
func (tp *treePorts) post(r, p int, clock, tx float64, nics *roundNICs) (start, free float64) {
	if tp == nil {
		start = nics.slot(r, p, clock, tx)
		return start, start + tx
	}
	port := 0
	for i, x := range tp.portFree[r] {
		if x < tp.portFree[r][port] {
			port = i
		}
	}
	li := -1
	for i, lb := range tp.linkFree[r] {
		if lb.peer == p {
			li = i
		}
	}
	if li < 0 {
		li = len(tp.linkFree[r])
		tp.linkFree[r] = append(tp.linkFree[r], linkBusy{p, 0})
	}
	start = math.Max(clock, math.Max(tp.portFree[r][port], tp.linkFree[r][li].free))
	ready := start
	start = nics.slot(r, p, ready, tx)
	tp.portFree[r][port], tp.linkFree[r][li].free = start+tx, start+tx
	return start, ready
}

// roundNICs are the shared NICs (Model.NICs) of Tree's formula: a send
// between nodes takes the earliest gap at or after its ready time that
// its NIC has for its transfer. The formula takes a round's sends in rank
// order and the rounds in schedule order, where the simulator serves
// each NIC in order of ready time: filling gaps lets a send ready earlier
// but reached later go first, as there, without moving the sends already
// placed (an approximation: TestCostMatchesSimulatorSharedNICs).
type roundNICs struct {
	m    cost.Model
	s    cost.Shape
	busy [][]interval // by NIC (Model.nicOf), in order of start, disjoint
}

type interval struct{ start, end float64 }

// newRoundNICs is nil when nothing is shared.
func newRoundNICs(m cost.Model, s cost.Shape) *roundNICs {
	if m.NICs <= 0 || s.Nodes <= 1 || s.LocalSize <= 0 {
		return nil
	}
	return &roundNICs{m: m, s: s, busy: make([][]interval, s.Nodes*m.NICs)}
}

// slot is the start of a message from r to p ready at ready that takes tx
// on the wire: ready within a node, else the earliest gap of its NIC.
// Adjacent busy intervals are merged, so a NIC that is never idle keeps
// one.
func (n *roundNICs) slot(r, p int, ready, tx float64) float64 {
	if n == nil || r/n.s.LocalSize == p/n.s.LocalSize {
		return ready
	}
	i := n.m.NICOf(n.s, r)
	b := n.busy[i]
	at := sort.Search(len(b), func(j int) bool { return b[j].end > ready }) // the first interval it can meet
	start := ready
	for ; at < len(b) && start+tx > b[at].start; at++ {
		start = math.Max(start, b[at].end)
	}
	// [start, start+tx) goes before b[at], after b[at-1].
	switch joinPrev, joinNext := at > 0 && b[at-1].end == start, at < len(b) && b[at].start == start+tx; {
	case joinPrev && joinNext:
		b[at-1].end = b[at].end
		b = append(b[:at], b[at+1:]...)
	case joinPrev:
		b[at-1].end = start + tx
	case joinNext:
		b[at].start = start
	default:
		b = slices.Insert(b, at, interval{start, start + tx})
	}
	n.busy[i] = b
	return start
}

// forget drops the busy intervals that end before t: no send is ready
// earlier than the ranks' earliest clock, t.
func (n *roundNICs) forget(t float64) {
	if n == nil {
		return
	}
	for i, b := range n.busy {
		k := sort.Search(len(b), func(j int) bool { return b[j].end > t })
		n.busy[i] = b[k:]
	}
}

// treeWork is Tree's work (cost.Work): in each tree every edge carries the
// half's S segments up, reduced by the parent, and down again.
func treeWork(m cost.Model, s cost.Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 || b == 0 {
		return 0
	}
	w := cost.NewWork(m, s)
	segs, c := treeSegments(m, b)
	for r := range n {
		for t := range 2 {
			if p := dtreeNode(n, r, t).parent; p >= 0 {
				w.Send(r, p, c, segs)
				w.Reduce(p, segs*c)
				w.Send(p, r, c, segs)
			}
		}
	}
	return w.Busiest()
}

// treeSegments is how many segments of how many bytes each half of b
// bytes goes in under m (as the formulas count them).
func treeSegments(m cost.Model, b float64) (segs, c float64) {
	half := b / 2
	segs = math.Max(1, math.Ceil(half/float64(m.MaxSegment(treeSegmentBytes))))
	return segs, half / segs
}
