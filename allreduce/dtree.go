package allreduce

import (
	"context"
	"math"
	"math/bits"

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
// equal segments of at most the segment size (256 KiB, treeSegmentBytes),
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

// tuning is a Group's segment sizes and thresholds for the pipelined and
// large-message algorithms; zero fields take the defaults. Tests shrink
// them so that multi-segment paths run on small inputs (export_test.go).
type tuning struct {
	treeSegment  int // bytes per segment of Tree (treeSegmentBytes)
	chainSegment int // bytes per segment of the pipelined chains (chainSegments)
	chainMin     int // smallest Broadcast or Reduce sent by chain (chainMinBytes)
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

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
	segElems := max(1, orDefault(g.tune.treeSegment, treeSegmentBytes)/es)
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

// treeCost is Tree's predicted time for S segments of c bytes per half
// and trees of depth D = ⌈log2 N⌉. Its rounds interleave two trees, two
// children each, and a rank's sends in one round wait for its receives of
// the round before, so its critical path has no simple closed form; this
// one was fitted to the simulator's times of the schedule (α, β and γ
// each alone, N = 2..64, S = 1..8): the agreement step and 2D+1 message
// latencies, 3D+1 segment transfers and 2D+1 segment reductions for the
// first segment, and about 6 latencies, 7 transfers and 4 reductions for
// each further one. TestCostMatchesSimulator bounds its error (looser
// than the other algorithms': the terms overlap in the pipeline).
func treeCost(m Model, s Shape, b float64) float64 {
	n := s.Ranks
	if n == 1 {
		return 0
	}
	if b == 0 {
		return agreeCost(m, s)
	}
	half := b / 2
	segs := math.Max(1, math.Ceil(half/treeSegmentBytes))
	c := half / segs
	// On several nodes the lowest levels of the trees (ranks less than a
	// node apart) are intra-node, the top ones inter-node; the segments'
	// throughput is the inter-node link's.
	d := log2ceil(n)
	dIntra := d
	if s.Nodes > 1 {
		dIntra = min(d, log2ceil(s.LocalSize+1)-1)
	}
	levels := func(f func(Link) float64) float64 {
		return float64(dIntra)*f(m.Intra) + float64(d-dIntra)*f(m.Inter)
	}
	top := m.link(s)
	alpha := func(l Link) float64 { return l.Alpha }
	beta := func(l Link) float64 { return l.transfer(c) }
	// Each further segment: on two ranks (one edge per tree) 4 latencies,
	// 4 transfers and 2 reductions; otherwise 6, 7 and 4, half of the
	// transfers on each kind of link when the trees span nodes.
	ka, kb, kg := 6.0, 7.0, 4.0
	if n == 2 {
		ka, kb, kg = 4, 4, 2
	}
	segTransfer := top.transfer(c)
	if s.Nodes > 1 {
		segTransfer = (m.Intra.transfer(c) + m.Inter.transfer(c)) / 2
	}
	return 2*top.Alpha + 2*levels(alpha) + ka*(segs-1)*top.Alpha +
		top.transfer(c) + 3*levels(beta) + kb*(segs-1)*segTransfer +
		c*m.Gamma*(2*float64(d)+1+kg*(segs-1))
}
