package inproc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Conn is one rank's endpoint in a World. It implements transport.Conn,
// transport.Exchanger and transport.Aborter (and transport.PeerMemory).
type Conn struct {
	world *World
	rank  int
	end   *lifecycle.End // Close or Abort

	// PeerMemory state.
	views        [][]byte
	stage        atomic.Uint64 // barriers this rank has arrived at
	arrivals     uint64        // the same, owned by this rank
	wake         chan struct{} // capacity 1: poked when a peer arrives
	barrierTimer *time.Timer
}

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

// Rank is this endpoint's rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the number of ranks in the world.
func (c *Conn) Size() int { return c.world.size }

// LocalRank is this rank's index on its node: the rank itself (every
// in-process rank is on this host) unless WithLocalSize simulates nodes.
func (c *Conn) LocalRank() int {
	if k := c.world.localSize; k > 0 {
		return c.rank % k
	}
	return c.rank
}

// LocalSize is the number of ranks on this rank's node: the world size
// unless WithLocalSize simulates nodes.
func (c *Conn) LocalSize() int {
	if k := c.world.localSize; k > 0 {
		return min(k, c.world.size-c.rank/k*k)
	}
	return c.world.size
}

// NodeName names this rank's simulated node ("node0", ...) under
// WithLocalSize, and is "" (unknown) otherwise.
func (c *Conn) NodeName() string {
	if k := c.world.localSize; k > 0 {
		return fmt.Sprintf("node%d", c.rank/k)
	}
	return ""
}

// Close fails pending and later calls on this endpoint with
// transport.ErrClosed; peers see a transport.PeerError.
func (c *Conn) Close() error {
	c.kill(transport.ErrClosed)
	return nil
}

// Abort marks this rank failed with cause; peers blocked on it fail at once
// with a transport.PeerError carrying cause.
func (c *Conn) Abort(cause error) { c.kill(lifecycle.AbortCause(cause)) }

func (c *Conn) kill(cause error) {
	c.end.Finish(cause, nil, func() {
		c.world.noteFailure(c.rank)
		if !errors.Is(cause, transport.ErrClosed) {
			c.world.noteAbort(c.rank)
		}
	})
}

func (c *Conn) check(peer int) error {
	if peer < 0 || peer >= c.world.size {
		return fmt.Errorf("inproc: rank %d: %w (world size %d)", peer, transport.ErrInvalid, c.world.size)
	}
	select {
	case <-c.end.Dead():
		return c.end.Err()
	default:
		return nil
	}
}

func (c *Conn) peerErr(peer int) error {
	return &transport.PeerError{Peer: peer, Err: c.world.conns[peer].end.Cause()}
}

func cutErr(from, to int) error {
	return &transport.PeerError{Peer: to, Err: fmt.Errorf("link %d→%d cut", from, to)}
}

// Send lends p to rank to and returns when the receiver has consumed it.
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if err := c.check(to); err != nil {
		return err
	}
	l, posted, err := c.post(ctx, to, h, p)
	if err != nil || !posted {
		return err
	}
	return c.awaitDone(ctx, l, to)
}

// Recv takes the next message from rank from and hands it to sink straight
// from the sender's buffer.
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	if err := c.check(from); err != nil {
		return err
	}
	return c.take(ctx, from, h, n, sink)
}

// Exchange lends sp to rank to and receives from rank from at once.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if err := c.check(to); err != nil {
		return err
	}
	if err := c.check(from); err != nil {
		return err
	}
	l, posted, err := c.post(ctx, to, sh, sp)
	if err != nil {
		return err
	}
	rerr := c.take(ctx, from, rh, n, sink)
	if !posted {
		return rerr
	}
	if rerr != nil {
		c.retract(l)
		return rerr
	}
	return c.awaitDone(ctx, l, to)
}

// post offers p on the link to rank to. posted is false when a fault
// swallowed the message.
func (c *Conn) post(ctx context.Context, to int, h transport.Header, p []byte) (*link, bool, error) {
	l := c.world.link(c.rank, to)
	if f := l.currentFault(); f != (Fault{}) {
		if f.Err != nil {
			return l, false, fmt.Errorf("inproc link %d→%d: %w", c.rank, to, f.Err)
		}
		if f.Delay > 0 {
			if err := c.sleep(ctx, l.sendTimer, f.Delay); err != nil {
				return l, false, err
			}
		}
		if f.Drop {
			return l, false, nil
		}
		if f.Cut {
			return l, false, cutErr(c.rank, to)
		}
	}
	if err := c.alive(ctx, l, to); err != nil {
		return l, false, err
	}
	l.h, l.p, l.verdict = h, p, nil
	l.state.Store(statePosted)
	poke(l.recvWake)
	return l, true, nil
}

// alive reports why a message to or from peer cannot move, if it cannot.
func (c *Conn) alive(ctx context.Context, l *link, peer int) error {
	// One channel at a time: a select over several always locks them
	// all, a single-case one with a default only looks (this runs on
	// every message).
	if err := ctx.Err(); err != nil {
		return err
	}
	if isClosed(c.end.Dead()) {
		return c.end.Err()
	}
	if isClosed(c.world.conns[peer].end.Dead()) {
		return c.peerErr(peer)
	}
	if isClosed(l.cut) {
		return cutErr(c.rank, peer)
	}
	return nil
}

// isClosed reports whether ch, a channel that is only ever closed, is.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// awaitDone waits for the receiver's verdict on the buffer posted on l.
func (c *Conn) awaitDone(ctx context.Context, l *link, to int) error {
	if !l.spinFor(stateDone) {
		if err := c.park(ctx, l, to, stateDone, l.sendWake, l.sendTimer, "send"); err != nil {
			c.retract(l)
			return err
		}
	}
	verdict := l.verdict
	l.p, l.verdict = nil, nil
	l.state.Store(stateIdle)
	return verdict
}

// park blocks until l reaches state want or the wait fails.
func (c *Conn) park(ctx context.Context, l *link, peer int, want uint32, wake chan struct{}, t *time.Timer, what string) error {
	t.Reset(c.world.timeout)
	defer t.Stop()
	dead := c.world.conns[peer].end.Dead()
	for l.state.Load() != want {
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.end.Dead():
			return c.end.Err()
		case <-dead:
			if l.state.Load() == want {
				return nil
			}
			return c.peerErr(peer)
		case <-l.cut:
			return cutErr(c.rank, peer)
		case <-t.C:
			return &transport.TimeoutError{Peer: peer, What: what, After: c.world.timeout.String()}
		case <-c.world.aborted:
			if l.state.Load() == want {
				return nil
			}
			return c.abortedErr()
		}
	}
	return nil
}

// abortedErr is the error of a call cut short because a rank aborted.
func (c *Conn) abortedErr() error {
	r := c.world.firstAborted()
	if r == c.rank {
		return c.end.Err()
	}
	return c.peerErr(r)
}

// retract takes back a buffer the receiver has not picked up, or, if it
// has, waits for it to finish with the buffer (a bounded copy or reduce).
func (c *Conn) retract(l *link) {
	if l.state.CompareAndSwap(statePosted, stateIdle) {
		l.p = nil
		return
	}
	for l.state.Load() == stateTaken {
		runtime.Gosched()
	}
	l.p, l.verdict = nil, nil
	l.state.Store(stateIdle)
}

// take receives one message from rank from into sink.
func (c *Conn) take(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	l := c.world.link(from, c.rank)
	if !l.spinFor(statePosted) {
		if err := c.park(ctx, l, from, statePosted, l.recvWake, l.recvTimer, "recv"); err != nil {
			return err
		}
	}
	if !l.state.CompareAndSwap(statePosted, stateTaken) {
		// The sender gave up between our check and now.
		return c.withdrawn(ctx, l, from, "message")
	}
	var err error
	if l.h != h || len(l.p) != n {
		l.verdict = &transport.MismatchError{Rank: from, Peer: c.rank, Local: l.h, LocalBytes: len(l.p), Remote: h, RemoteBytes: n}
		err = &transport.MismatchError{Rank: c.rank, Peer: from, Local: h, LocalBytes: n, Remote: l.h, RemoteBytes: len(l.p)}
	} else if n > 0 {
		sink.Consume(0, l.p)
	}
	l.state.Store(stateDone)
	poke(l.sendWake)
	return err
}

// withdrawn explains a message or exposed buffer that rank from took back
// before this rank could take it. A sender withdraws only when its own call
// failed, and a Group aborts its transport right after a failed call, so
// the sender's abort cause, which says why (a mismatch it found, say), is
// about to arrive: wait for it rather than report the bare withdrawal,
// which would then become the cause every other rank inherits. The wait
// ends early if the sender posts again (it went on without aborting), this
// rank fails, ctx ends or the timeout passes.
func (c *Conn) withdrawn(ctx context.Context, l *link, from int, what string) error {
	bare := &transport.PeerError{Peer: from, Err: fmt.Errorf("rank %d withdrew its %s", from, what)}
	t := time.NewTimer(c.world.timeout)
	defer t.Stop()
	for l.state.Load() != statePosted {
		select {
		case <-c.world.conns[from].end.Dead():
			return c.peerErr(from)
		case <-c.end.Dead():
			return c.end.Err()
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return bare
		case <-c.world.aborted:
			return c.abortedErr()
		case <-l.recvWake:
		}
	}
	return bare
}

func (c *Conn) sleep(ctx context.Context, t *time.Timer, d time.Duration) error {
	t.Reset(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.end.Dead():
		return c.end.Err()
	}
}
