package allreduce

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Split partitions g's ranks like MPI_Comm_split and ncclCommSplit: the
// ranks passing the same color form a new group, numbered by key (ties
// broken by rank in g). A negative color makes no group: that rank gets
// nil. It is a collective over g (an all-gather of every rank's color and
// key): every rank of g calls it, in the same order as g's other calls.
//
// The new group runs over g's transport and shares g's sequencer: it has
// its own sequence numbers and its own id in every message header, so a
// message of one group can never be taken for another's, and the calls of
// every group of the family run one at a time on each rank in the order
// they were issued (ranks must issue them in the same order). A failure
// in any of them poisons the whole family; closing the new group leaves g
// working. It inherits g's algorithm where it can run it (not Direct: a
// split group does not share memory), else Auto, and g's Broadcast/Reduce
// schedule.
func (g *Group) Split(ctx context.Context, color, key int) (*Group, error) {
	all := make([]int64, 2*g.size)
	mine := []int64{int64(color), int64(key)}
	c := call{kind: KindAllGather, dt: Int64, root: -1, count: 2 * g.size, buf: asBytes(all), src: asBytes(mine)}
	if err := g.do(ctx, &c); err != nil {
		return nil, err
	}
	g.seq.mu.Lock()
	index := g.splits
	g.splits++
	g.seq.mu.Unlock()
	if color < 0 {
		return nil, nil
	}
	var members []int
	for r := range g.size {
		if all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int {
		switch ka, kb := all[2*a+1], all[2*b+1]; {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return a - b
	})
	return g.subgroup(members, childID(g.id, "split", uint64(index), uint64(color))), nil
}

// subgroup is the group of g's ranks members (in that order; this rank
// must be one of them) with header id id, made without communication:
// every member must derive the same members and id, as algorithms built on
// topology do.
func (g *Group) subgroup(members []int, id uint32) *Group {
	world := make([]int, len(members))
	rank := -1
	for i, m := range members {
		world[i] = g.worldOf(m)
		if m == g.rank {
			rank = i
		}
	}
	root := g.rootConn()
	sc := &subConn{root: root, world: world, rank: rank}
	child := &Group{conn: sc, rank: rank, size: len(members), id: id, worldRank: g.worldRank,
		world: world, node: g.node, seq: g.seq, asked: g.asked,
		model: g.model, modelSet: true, virtual: g.virtual}
	if ex, ok := root.(transport.Exchanger); ok {
		sc.ex = ex
		child.exchanger = sc
	}
	if child.checkAsked() != nil {
		child.asked[KindAllReduce] = uint8(Auto)
	}
	return child
}

// worldOf is rank r of g in the root group's numbering.
func (g *Group) worldOf(r int) int {
	if g.world == nil {
		return r
	}
	return g.world[r]
}

// rootConn is the transport of the family's root group.
func (g *Group) rootConn() transport.Conn {
	if sc, ok := g.conn.(*subConn); ok {
		return sc.root
	}
	return g.conn
}

// childID derives a sub-group's header id from its parent's and what
// tells it from its siblings; never 0 (a root group's) nor the parent's.
func childID(parent uint32, kind string, parts ...uint64) uint32 {
	h := fnv.New32a()
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], parent)
	_, _ = h.Write(b[:4])
	_, _ = h.Write([]byte(kind))
	for _, p := range parts {
		binary.BigEndian.PutUint64(b[:], p)
		_, _ = h.Write(b[:])
	}
	id := h.Sum32()
	if id == 0 || id == parent {
		id = ^parent
	}
	return id
}

// subConn is a split group's view of the root transport: ranks are the
// sub-group's, mapped to the root's (world). Errors from the root name
// the root's ranks, as every error of the family does. Closing it is a
// no-op (the root group owns the transport); aborting it aborts the root.
type subConn struct {
	root  transport.Conn
	ex    transport.Exchanger // the root's, or nil
	world []int
	rank  int
}

func (s *subConn) Rank() int { return s.rank }
func (s *subConn) Size() int { return len(s.world) }

func (s *subConn) peer(r int) (int, error) {
	if r < 0 || r >= len(s.world) {
		return 0, fmt.Errorf("allreduce: sub-group rank %d: %w (size %d)", r, transport.ErrInvalid, len(s.world))
	}
	return s.world[r], nil
}

func (s *subConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	w, err := s.peer(to)
	if err != nil {
		return err
	}
	return s.root.Send(ctx, w, h, p)
}

func (s *subConn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	w, err := s.peer(from)
	if err != nil {
		return err
	}
	return s.root.Recv(ctx, w, h, n, sink)
}

func (s *subConn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	wt, err := s.peer(to)
	if err != nil {
		return err
	}
	wf, err := s.peer(from)
	if err != nil {
		return err
	}
	return s.ex.Exchange(ctx, wt, sh, sp, wf, rh, n, sink)
}

func (s *subConn) Close() error { return nil }

func (s *subConn) Abort(cause error) {
	if a, ok := s.root.(transport.Aborter); ok {
		a.Abort(cause)
	}
}

// NoteStall passes this rank's stall notice (in world ranks) to the root
// transport, if it carries notices.
func (s *subConn) NoteStall(st transport.Stall) {
	if n, ok := s.root.(stallNotifier); ok {
		n.NoteStall(st)
	}
}

// PeerStall returns the root transport's last notice from world rank
// rank.
func (s *subConn) PeerStall(rank int) (transport.Stall, bool) {
	if n, ok := s.root.(stallNotifier); ok {
		return n.PeerStall(rank)
	}
	return transport.Stall{}, false
}
