package allreduce

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Group is a communicator: the ranks of one transport.Conn and the state
// that keeps their collectives in step. Collectives on a Group run one at a
// time in the order their sequence numbers were taken, which is the order
// the calls were issued on this rank; every rank must issue the same
// collectives in the same order. A Group is safe for concurrent use.
type Group struct {
	conn      transport.Conn
	exchanger transport.Exchanger // nil when conn lacks the capability
	rank      int
	size      int
	algorithm Algorithm

	mu      sync.Mutex
	next    uint64 // sequence number of the next call issued
	turn    uint64 // sequence number of the call allowed to run
	failure error  // the first error; poisons the group
	pending sync.WaitGroup
	// turnPassed is closed (and replaced) when the turn moves on while
	// calls are waiting for theirs; waiting counts them, so an
	// uncontended call never allocates a channel.
	turnPassed chan struct{}
	waiting    int
	abandoned  map[uint64]bool // calls whose context ended before their turn

	// Reused by the collective that holds the turn.
	copy    copySink
	combine combineSink
	scratch []int64
}

// GroupOption configures a Group.
type GroupOption func(*Group)

// WithAlgorithm sets the AllReduce algorithm. An algorithm whose
// requirements the transport does not meet (Direct without shared memory)
// is an error at NewGroup, before any communication.
func WithAlgorithm(a Algorithm) GroupOption { return func(g *Group) { g.algorithm = a } }

// Algorithm is the AllReduce algorithm in use for large buffers: the one
// asked for, or what Auto picks for them (Auto takes recursive doubling
// for buffers up to 64 KiB where ranks do not share memory).
func (g *Group) Algorithm() Algorithm {
	if g.algorithm != Auto {
		return g.algorithm
	}
	if _, ok := g.conn.(transport.PeerMemory); ok {
		return Direct
	}
	return Ring
}

// NewGroup makes a Group over conn. The Group owns conn and closes it.
func NewGroup(conn transport.Conn, opts ...GroupOption) (*Group, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrInvalid)
	}
	n, r := conn.Size(), conn.Rank()
	if n < 1 || r < 0 || r >= n {
		return nil, fmt.Errorf("%w: transport reports rank %d of %d", ErrInvalid, r, n)
	}
	g := &Group{conn: conn, rank: r, size: n}
	if ex, ok := conn.(transport.Exchanger); ok {
		g.exchanger = ex
	}
	for _, o := range opts {
		o(g)
	}
	if err := g.checkAlgorithm(); err != nil {
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
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failure
}

// Abort poisons the group with cause, as a failed collective would: every
// queued and later call fails, and peers blocked on this rank fail at once.
// Use it when this rank cannot go on (say its backward pass failed) so the
// others do not wait for their timeout.
func (g *Group) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	g.mu.Lock()
	first := g.failure == nil
	if first {
		g.failure = cause
	}
	g.mu.Unlock()
	if first {
		g.abortConn(cause)
	}
}

// Close fails every queued and later collective, closes the transport and
// waits for the asynchronous collectives to return.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.failure == nil {
		g.failure = fmt.Errorf("allreduce: group closed: %w", transport.ErrClosed)
	}
	g.mu.Unlock()
	err := g.conn.Close()
	g.pending.Wait()
	return err
}

// ticket takes the next sequence number.
func (g *Group) ticket() uint64 {
	g.mu.Lock()
	seq := g.next
	g.next++
	g.mu.Unlock()
	return seq
}

// waitTurn blocks until the call with sequence number seq may run, or its
// context ends. It returns the poisoning error, if any, in which case the
// call must not communicate; a call whose context ended first poisons the
// group (its sequence number can no longer be matched) and is skipped.
func (g *Group) waitTurn(ctx context.Context, seq uint64) error {
	g.mu.Lock()
	for g.turn != seq {
		if g.turnPassed == nil {
			g.turnPassed = make(chan struct{})
		}
		ch := g.turnPassed
		g.waiting++
		g.mu.Unlock()
		select {
		case <-ch:
			g.mu.Lock()
			g.waiting--
		case <-ctx.Done():
			g.mu.Lock()
			g.waiting--
			if g.turn == seq { // raced with our turn: take it
				continue
			}
			err := fmt.Errorf("allreduce: rank %d: call #%d gave up waiting for its turn (call #%d still running): %w",
				g.rank, seq, g.turn, ctx.Err())
			if g.failure == nil {
				g.failure = err
			}
			if g.abandoned == nil {
				g.abandoned = make(map[uint64]bool)
			}
			g.abandoned[seq] = true
			g.mu.Unlock()
			g.abortConn(err)
			return err
		}
	}
	err := g.failure
	g.mu.Unlock()
	return err
}

// endTurn passes the turn on and, if err is the call's own failure,
// poisons the group and tells the peers.
func (g *Group) endTurn(err error) {
	g.mu.Lock()
	first := err != nil && g.failure == nil
	if first {
		g.failure = err
	}
	g.turn++
	for g.abandoned[g.turn] {
		delete(g.abandoned, g.turn)
		g.turn++
	}
	if g.waiting > 0 && g.turnPassed != nil {
		close(g.turnPassed)
		g.turnPassed = nil
	}
	g.mu.Unlock()
	if first {
		g.abortConn(err)
	}
}

func (g *Group) abortConn(cause error) {
	if a, ok := g.conn.(transport.Aborter); ok {
		a.Abort(cause)
	}
}

// run executes call c with sequence number seq once it is c's turn. An
// asynchronous call's Work w completes before the turn passes on, so a
// caller that saw it done issues its next call after it.
func (g *Group) run(ctx context.Context, seq uint64, c *call, w *Work) error {
	if failed := g.waitTurn(ctx, seq); failed != nil {
		g.mu.Lock()
		skipped := g.abandoned[seq]
		g.mu.Unlock()
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
		err = g.execute(ctx, seq, c)
	}
	if err != nil {
		err = callError(g.rank, seq, c, err)
	}
	if w != nil {
		w.finish(err)
	}
	g.endTurn(err)
	return err
}

// do runs c synchronously.
func (g *Group) do(ctx context.Context, c *call) error {
	return g.run(ctx, g.ticket(), c, nil)
}

// start runs c on its own goroutine. Its sequence number is taken here, on
// the calling goroutine.
func (g *Group) start(ctx context.Context, c call) *Work {
	seq := g.ticket()
	w := newWork()
	g.pending.Add(1)
	go func() {
		defer g.pending.Done()
		_ = g.run(ctx, seq, &c, w)
	}()
	return w
}

// execute dispatches to the algorithm.
func (g *Group) execute(ctx context.Context, seq uint64, c *call) error {
	h := c.header(seq)
	switch c.kind {
	case KindAllReduce:
		spec, _ := g.algorithm.spec()
		return spec.run(g, ctx, h, c)
	case KindReduceScatter:
		return g.ringReduceScatter(ctx, h, c)
	case KindAllGather:
		return g.ringAllGather(ctx, h, c)
	case KindBroadcast:
		return g.treeBroadcast(ctx, h, c)
	case KindReduce:
		return g.treeReduce(ctx, h, c)
	case KindBarrier:
		return g.disseminationBarrier(ctx, h)
	}
	return fmt.Errorf("%w: unknown collective %v", ErrInvalid, c.kind)
}

// exchange sends sp to rank to while receiving n bytes from rank from into
// sink: one step of a ring.
func (g *Group) exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if g.exchanger != nil {
		return g.exchanger.Exchange(ctx, to, sh, sp, from, rh, n, sink)
	}
	sent := make(chan error, 1)
	go func() { sent <- g.conn.Send(ctx, to, sh, sp) }()
	rerr := g.conn.Recv(ctx, from, rh, n, sink)
	if rerr != nil {
		if a, ok := g.conn.(transport.Aborter); ok {
			a.Abort(rerr)
		}
	}
	serr := <-sent
	if rerr != nil {
		return rerr
	}
	return serr
}

// scratchBytes returns an 8-byte aligned scratch buffer of n bytes, reused
// across calls.
func (g *Group) scratchBytes(n int) []byte {
	words := (n + 7) / 8
	if cap(g.scratch) < words {
		g.scratch = make([]int64, words)
	}
	return asBytes(g.scratch[:words])[:n]
}

func mod(a, n int) int { return ((a % n) + n) % n }
