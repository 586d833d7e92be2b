//go:build linux

package shm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Conn is one rank's endpoint of a shared-memory world: a link with each
// other rank, made of the ring into this rank (in this rank's file) and
// the ring out of it (in the peer's). It implements transport.Conn,
// transport.Exchanger and transport.Aborter; NodeName, LocalRank and
// LocalSize place it (every rank of the world is on this host).
type Conn struct {
	cfg        Config
	rank, size int
	own        *region  // this rank's file; nil in a world of one
	bell       doorbell // this rank's doorbell, in own
	// core: the links by peer (nil at this rank), the self link, the
	// checks of every call; its End is ended by Close or Abort.
	core mpconn.Core[*link]

	watchers sync.WaitGroup

	refs refs // the mappings stay until Close and the last call are done

	polls int // steps a waiting call polls before it yields (pollsFor)

	ex exposure // PeerMemory's state (expose_linux.go)
}

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

func newConn(cfg Config) *Conn {
	return &Conn{
		cfg:   cfg,
		rank:  cfg.Rank,
		size:  cfg.Size,
		core:  mpconn.NewCore[*link]("shm", cfg.Rank, cfg.Size, cfg.MaxMessage, cfg.Timeout, cfg.SlotSize),
		polls: pollsFor(cfg.Size),
	}
}

// Rank is this endpoint's rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Conn) Size() int { return c.size }

// NodeName names this host (Config.Node: the host name unless set).
func (c *Conn) NodeName() string { return c.cfg.Node }

// LocalRank is this rank's index on the host.
func (c *Conn) LocalRank() int { return c.cfg.LocalRank }

// LocalSize is the number of ranks on this host: all of them.
func (c *Conn) LocalSize() int { return c.size }

// enter starts a call that may touch the mappings; false once closed.
func (c *Conn) enter() bool { return c.refs.acquire() }

func (c *Conn) leave() { c.refs.release() }

// Send copies p into the ring to rank to, slot by slot, and returns once
// the last piece is in the ring (not once the peer has read it).
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	l, err := c.core.SendLink(ctx, to, len(p))
	if err != nil {
		return err
	}
	if l == nil {
		return c.core.SendSelf(ctx, h, p)
	}
	if !c.enter() {
		return c.core.End.Err()
	}
	defer c.leave()
	if err := l.check(); err != nil {
		return err
	}
	s := sendOp{l: l, h: h, p: p}
	return c.drive(ctx, "send", to, &s, nil)
}

// Recv hands the next message from rank from to sink straight out of the
// ring's slots, one slot-sized piece at a time.
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	l, err := c.core.RecvLink(ctx, from, n)
	if err != nil {
		return err
	}
	if l == nil {
		return c.core.Self.Recv(ctx, h, n, sink)
	}
	if !c.enter() {
		return c.core.End.Err()
	}
	defer c.leave()
	if err := l.err(); err != nil {
		return err
	}
	r := recvOp{l: l, h: h, n: n, sink: sink}
	return c.drive(ctx, "recv", from, nil, &r)
}

// Exchange sends sp to rank to while receiving from rank from, on the
// caller's goroutine: it fills free slots of one ring and drains full
// slots of the other, alternately, and sleeps only when neither can move.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	lt, lf, err := c.core.ExchangeLinks(ctx, to, len(sp), from, n)
	if err != nil {
		return err
	}
	switch {
	case lt == nil:
		// To itself: offer the message, receive, then wait for whoever
		// takes it (this call, when from is this rank too).
		c.core.Self.Post(sh, sp)
		var rerr error
		if lf == nil {
			rerr = c.core.Self.Recv(ctx, rh, n, sink)
		} else {
			rerr = c.Recv(ctx, from, rh, n, sink)
		}
		serr := c.core.Self.WaitSend(ctx)
		if rerr != nil {
			return rerr
		}
		return serr
	case lf == nil:
		if err := c.Send(ctx, to, sh, sp); err != nil {
			return err
		}
		return c.core.Self.Recv(ctx, rh, n, sink)
	}
	if !c.enter() {
		return c.core.End.Err()
	}
	defer c.leave()
	if err := lt.check(); err != nil {
		return err
	}
	if err := lf.err(); err != nil {
		return err
	}
	s := sendOp{l: lt, h: sh, p: sp}
	r := recvOp{l: lf, h: rh, n: n, sink: sink}
	return c.drive(ctx, "exchange", from, &s, &r)
}

// Close ends this endpoint: it records a goodbye in its status block,
// wakes every peer and its own pending calls (they fail with
// transport.ErrClosed; peers' calls involving this rank with a
// *transport.PeerError), closes its sockets and unmaps its rings once the
// last pending call has returned.
func (c *Conn) Close() error {
	c.shutdown(transport.ErrClosed, true)
	return nil
}

// Abort marks this rank failed with cause: peers' calls involving it fail
// with a *transport.PeerError carrying an *AbortError with the cause, and
// this endpoint closes.
func (c *Conn) Abort(cause error) { c.shutdown(lifecycle.AbortCause(cause), true) }

func (c *Conn) shutdown(cause error, tell bool) {
	c.core.End.Finish(cause, nil, func() {
		if c.own != nil {
			if tell {
				state := uint32(stateAborted)
				if errors.Is(cause, transport.ErrClosed) {
					state = stateClosed
				}
				c.own.setStatus(state, cause)
			}
			for _, l := range c.core.Links {
				if l != nil && tell {
					l.peerBell.force()
				}
			}
			c.bell.force()
		}
		for _, l := range c.core.Links {
			if l != nil {
				_ = l.sock.Close()
			}
		}
		c.watchers.Wait()
		c.refs.close(c.unmap)
	})
}

// unmap releases every mapping; run once, after the last call.
func (c *Conn) unmap() {
	for _, l := range c.core.Links {
		if l != nil {
			l.reg.unmap()
		}
	}
	if c.own != nil {
		c.own.unmap()
	}
}

// kill drops every socket without a status, as a crashed process would.
// For tests.
func (c *Conn) kill() { c.shutdown(errors.New("killed"), false) }

// refs counts the calls using the mappings: once closed, the last call
// to leave (or close itself, if none is in) runs fin, once. Lock-free:
// every call enters and leaves, so this is on the path of every message.
type refs struct {
	state atomic.Int64 // calls in, plus refsClosed once closed
	fin   func()       // set before refsClosed is
	ran   atomic.Bool
}

const refsClosed = 1 << 62

func (r *refs) acquire() bool {
	if r.state.Add(1)&refsClosed != 0 {
		r.release()
		return false
	}
	return true
}

func (r *refs) release() {
	if r.state.Add(-1) == refsClosed {
		r.finish()
	}
}

func (r *refs) close(fin func()) {
	r.fin = fin
	if r.state.Add(refsClosed) == refsClosed {
		r.finish()
	}
}

func (r *refs) finish() {
	if r.ran.CompareAndSwap(false, true) {
		r.fin()
	}
}
