package allreduce

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Group is a communicator: the ranks of one transport.Conn and the state
// that keeps their collectives in step. Collectives on a Group run one at a
// time in the order they were issued on this rank; every rank must issue
// the same collectives in the same order. A Group is safe for concurrent
// use.
//
// Groups made by Split share their parent's transport and sequencer (see
// sequencer): each numbers its own calls, and a failure anywhere in the
// family poisons all of it.
type Group struct {
	conn      transport.Conn
	exchanger transport.Exchanger // nil when conn lacks the capability
	rank      int
	size      int

	// id is the Group field of every header this group sends: 0 for a
	// group made by NewGroup, derived from the parent's for a split one,
	// so that a message of one group is never taken for another's.
	id uint32
	// worldRank is this rank in the root group, the numbering errors use
	// (transport errors name the root transport's ranks).
	worldRank int
	// world maps this group's ranks to the root group's.
	world []int
	// node names this rank's node (WithNode, or the transport's), for
	// Topology; "" when unknown.
	node string

	seq     *sequencer
	nextSeq uint64 // header sequence number of this group's next call (under seq.mu)
	splits  uint32 // sub-groups made from this one (under seq.mu), for their ids
	closed  error  // set by Close on a split group (under seq.mu)
	topo    *Topology
	pending sync.WaitGroup

	// Reused by the collective that holds the turn.
	running call
	copy    copySink
	combine combineSink
	scratch []int64

	tune tuning // segment sizes and thresholds (dtree.go); zero: defaults

	// The selector's state (selector.go): model, the cost model Auto
	// chooses by (cost.DefaultModelFor the group unless modelSet);
	// shape, the group's shape once known (learnt on Auto's first
	// AllReduce, or set by the algorithm that made the sub-group); asked,
	// the row of the schedule table each collective asked for, by Kind (0:
	// Auto); picks, Auto's choice per collective and size class
	// (sizeClass), 0 where not yet made, used by the call holding the
	// turn; badOption, an option's error for NewGroup.
	model     cost.Model
	modelSet  bool
	shape     *cost.Shape
	asked     [KindBarrier]uint8
	picks     [KindBarrier][65]uint8
	badOption error

	// virtual is the transport's virtual memory (virtual.go), nil when it
	// has none; virtualCall says the running call's buffers are virtual.
	virtual     virtualMemory
	virtualCall bool

	hier *hierarchy // sub-groups of the topology-aware algorithms (hierarchy.go), built on first use; used by the call holding the turn
}

// sequencer orders the collectives of a family of groups — a group made
// by NewGroup and every group split from it — on this rank. They share one
// transport, which carries one collective at a time, so their calls run
// one at a time in the order they were issued, whichever group they are
// on. The first error poisons the family: the transport is aborted for
// all of them.
type sequencer struct {
	mu      sync.Mutex
	next    uint64 // ticket of the next call issued
	turn    uint64 // ticket of the call allowed to run
	failure error  // the first error; poisons the family
	// turnPassed is closed (and replaced) when the turn moves on while
	// calls are waiting for theirs; waiting counts them, so an
	// uncontended call never allocates a channel.
	turnPassed chan struct{}
	waiting    int
	abandoned  map[uint64]bool // calls whose context ended before their turn
}

// GroupOption configures a Group.
type GroupOption func(*Group)

// NewGroup makes a Group over conn. The Group owns conn and closes it.
func NewGroup(conn transport.Conn, opts ...GroupOption) (*Group, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrInvalid)
	}
	n, r := conn.Size(), conn.Rank()
	if n < 1 || r < 0 || r >= n {
		return nil, fmt.Errorf("%w: transport reports rank %d of %d", ErrInvalid, r, n)
	}
	g := &Group{conn: conn, rank: r, size: n, worldRank: r, seq: &sequencer{}}
	if ex, ok := conn.(transport.Exchanger); ok {
		g.exchanger = ex
	}
	if nn, ok := conn.(nodeNamer); ok {
		g.node = nn.NodeName()
	}
	if vm, ok := conn.(virtualMemory); ok {
		g.virtual = vm
	}
	for _, o := range opts {
		o(g)
	}
	if !g.modelSet {
		s := cost.FlatShape(n)
		s.PeerMemory, s.LendLimit = lending(conn)
		g.model = cost.DefaultModelFor(s)
	} else if err := g.model.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := g.checkAsked(); err != nil {
		return nil, err
	}
	return g, nil
}

// Rank is this rank's index in the group.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Conn is the group's transport endpoint.
func (g *Group) Conn() transport.Conn { return g.conn }

// Err is the error that poisoned the group, or nil.
func (g *Group) Err() error {
	g.seq.mu.Lock()
	defer g.seq.mu.Unlock()
	return g.failedLocked()
}

// failedLocked is why calls on g cannot run, or nil; seq.mu is held.
func (g *Group) failedLocked() error {
	if g.seq.failure != nil {
		return g.seq.failure
	}
	return g.closed
}

// Abort poisons the group with cause, as a failed collective would: every
// queued and later call fails, and peers blocked on this rank fail at once.
// Use it when this rank cannot go on (say its backward pass failed) so the
// others do not wait for their timeout. It poisons every group split from
// the same root too: they share the transport.
func (g *Group) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	g.seq.mu.Lock()
	first := g.seq.failure == nil
	if first {
		g.seq.failure = cause
	}
	g.seq.mu.Unlock()
	if first {
		g.abortConn(cause)
	}
}

// Close fails every queued and later collective on g and waits for its
// asynchronous collectives to return. On a group made by NewGroup it
// also closes the transport, ending every group split from it; a split
// group's Close leaves its parent and siblings working.
func (g *Group) Close() error {
	closed := fmt.Errorf("allreduce: group closed: %w", transport.ErrClosed)
	g.seq.mu.Lock()
	split := g.world != nil
	if split {
		if g.closed == nil {
			g.closed = closed
		}
	} else if g.seq.failure == nil {
		g.seq.failure = closed
	}
	g.seq.mu.Unlock()
	var err error
	if !split {
		err = g.conn.Close()
	}
	g.pending.Wait()
	return err
}

// ticket takes the family's next ticket (the run order) and this group's
// next header sequence number.
func (g *Group) ticket() (ticket, seq uint64) {
	g.seq.mu.Lock()
	ticket, seq = g.seq.next, g.nextSeq
	g.seq.next++
	g.nextSeq++
	g.seq.mu.Unlock()
	return ticket, seq
}

// waitTurn blocks until the call with this ticket may run, or its context
// ends. It returns the poisoning error, if any, in which case the call must
// not communicate; a call whose context ended first poisons the family
// (its sequence number can no longer be matched) and is skipped.
func (g *Group) waitTurn(ctx context.Context, ticket, seq uint64) error {
	q := g.seq
	q.mu.Lock()
	for q.turn != ticket {
		if q.turnPassed == nil {
			q.turnPassed = make(chan struct{})
		}
		ch := q.turnPassed
		q.waiting++
		q.mu.Unlock()
		select {
		case <-ch:
			q.mu.Lock()
			q.waiting--
		case <-ctx.Done():
			q.mu.Lock()
			q.waiting--
			if q.turn == ticket { // raced with our turn: take it
				continue
			}
			err := fmt.Errorf("allreduce: rank %d: call #%d gave up waiting for its turn: %w", g.worldRank, seq, ctx.Err())
			if q.failure == nil {
				q.failure = err
			}
			if q.abandoned == nil {
				q.abandoned = make(map[uint64]bool)
			}
			q.abandoned[ticket] = true
			q.mu.Unlock()
			g.abortConn(err)
			return err
		}
	}
	err := g.failedLocked()
	q.mu.Unlock()
	return err
}

// endTurn passes the turn on and, if err is the call's own failure,
// poisons the family and tells the peers.
func (g *Group) endTurn(err error) {
	q := g.seq
	q.mu.Lock()
	first := err != nil && q.failure == nil
	if first {
		q.failure = err
	}
	q.turn++
	for q.abandoned[q.turn] {
		delete(q.abandoned, q.turn)
		q.turn++
	}
	if q.waiting > 0 && q.turnPassed != nil {
		close(q.turnPassed)
		q.turnPassed = nil
	}
	q.mu.Unlock()
	if first {
		g.abortConn(err)
	}
}

func (g *Group) abortConn(cause error) {
	if a, ok := g.conn.(transport.Aborter); ok {
		a.Abort(cause)
	}
}

// run executes call c (ticket, header sequence number seq) once it is
// c's turn. An asynchronous call's Work w completes before the turn passes
// on, so a caller that saw it done issues its next call after it.
func (g *Group) run(ctx context.Context, ticket, seq uint64, c *call, w *Work) error {
	if failed := g.waitTurn(ctx, ticket, seq); failed != nil {
		g.seq.mu.Lock()
		skipped := g.seq.abandoned[ticket]
		g.seq.mu.Unlock()
		if !errors.Is(failed, ErrGroupFailed) {
			failed = fmt.Errorf("%w: %w", ErrGroupFailed, failed)
		}
		if w != nil {
			w.finish(failed)
		}
		if !skipped {
			g.endTurn(nil)
		}
		return failed
	}
	err := c.validate(g.size)
	if err == nil {
		// Run a copy held by the group: dispatch through the algorithm
		// table is an indirect call, which would move the caller's call
		// to the heap (an allocation per collective).
		g.running = *c
		err = g.execute(ctx, seq, &g.running)
		g.running = call{}
	}
	if err != nil {
		h := c.header(g.id, seq)
		err = callError(g.worldRank, h, g.blameStall(ctx, h, err))
	}
	if w != nil {
		w.finish(err)
	}
	g.endTurn(err)
	return err
}

// nested runs c on g inside a collective of g's family that holds the
// turn (an algorithm built from collectives on sub-groups): it takes a
// header sequence number of g but no ticket. Every rank of g must run the
// same nested calls in the same order, as algorithms do.
func (g *Group) nested(ctx context.Context, c *call) error {
	g.seq.mu.Lock()
	seq := g.nextSeq
	g.nextSeq++
	failed := g.failedLocked()
	g.seq.mu.Unlock()
	if failed != nil {
		return failed
	}
	if err := c.validate(g.size); err != nil {
		return err
	}
	return g.execute(ctx, seq, c)
}

// do runs c synchronously.
func (g *Group) do(ctx context.Context, c *call) error {
	ticket, seq := g.ticket()
	return g.run(ctx, ticket, seq, c, nil)
}

// start runs c on its own goroutine. Its ticket is taken here, on the
// calling goroutine.
func (g *Group) start(ctx context.Context, c call) *Work {
	ticket, seq := g.ticket()
	w := newWork()
	g.pending.Add(1)
	go func() {
		defer g.pending.Done()
		_ = g.run(ctx, ticket, seq, &c, w)
	}()
	return w
}

// execute dispatches to the row of the schedule table the call runs.
func (g *Group) execute(ctx context.Context, seq uint64, c *call) error {
	h := c.header(g.id, seq)
	g.startCall(c)
	switch c.kind {
	case KindBarrier:
		return g.disseminationBarrier(ctx, h)
	case KindShift:
		return g.shift(ctx, h, c)
	}
	if _, ok := scheduleOf(c.kind, 1); ok {
		s, err := g.scheduleFor(ctx, c.kind, callBytes(c))
		if err != nil {
			return err
		}
		return s.run(g, ctx, h, c)
	}
	return fmt.Errorf("%w: unknown collective %v", ErrInvalid, c.kind)
}

// scratchBytes returns an 8-byte aligned scratch buffer of n bytes, reused
// across calls.
func (g *Group) scratchBytes(n int) []byte {
	if g.virtualCall {
		return g.virtual.VirtualBytes(n)
	}
	words := (n + 7) / 8
	if cap(g.scratch) < words {
		g.scratch = make([]int64, words)
	}
	return asBytes(g.scratch[:words])[:n]
}
