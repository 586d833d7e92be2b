//go:build linux

package shm

import (
	"context"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// selfLink carries messages a rank sends to itself (a ring of one, or any
// algorithm that does): the receiver's sink reads straight from the
// sender's buffer, and the send completes when the receiver is done, as in
// package inproc. Nothing touches shared memory.
type selfLink struct {
	c      *Conn
	posted chan selfMsg // capacity 1: the message on offer
	done   chan error   // capacity 1: the receiver's verdict
	stimer *time.Timer
	rtimer *time.Timer
}

type selfMsg struct {
	h transport.Header
	p []byte
}

func newSelfLink(c *Conn) *selfLink {
	s := &selfLink{
		c:      c,
		posted: make(chan selfMsg, 1),
		done:   make(chan error, 1),
		stimer: time.NewTimer(time.Hour),
		rtimer: time.NewTimer(time.Hour),
	}
	s.stimer.Stop()
	s.rtimer.Stop()
	return s
}

// post offers a message; the caller then waits with waitSend.
func (s *selfLink) post(h transport.Header, p []byte) {
	s.posted <- selfMsg{h: h, p: p}
}

// waitSend waits for the receiver's verdict; a send given up on is taken
// back, or, if the receiver already has it, waited for (it only copies).
func (s *selfLink) waitSend(ctx context.Context) error {
	timeout := s.c.cfg.Timeout
	s.stimer.Reset(timeout)
	defer s.stimer.Stop()
	var err error
	select {
	case v := <-s.done:
		return v
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.c.dead:
		err = s.c.deadErr()
	case <-s.stimer.C:
		err = &transport.TimeoutError{Peer: s.c.rank, What: "send", After: timeout.String()}
	}
	select {
	case <-s.posted: // taken back before the receiver saw it
	default:
		<-s.done // the receiver has it: wait until it lets go
	}
	return err
}

func (s *selfLink) recv(ctx context.Context, h transport.Header, n int, sink transport.Sink) error {
	timeout := s.c.cfg.Timeout
	s.rtimer.Reset(timeout)
	defer s.rtimer.Stop()
	var m selfMsg
	select {
	case m = <-s.posted:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.c.dead:
		return s.c.deadErr()
	case <-s.rtimer.C:
		return &transport.TimeoutError{Peer: s.c.rank, What: "recv", After: timeout.String()}
	}
	if m.h != h || len(m.p) != n {
		r := s.c.rank
		s.done <- &transport.MismatchError{Rank: r, Peer: r, Local: m.h, LocalBytes: len(m.p), Remote: h, RemoteBytes: n}
		return &transport.MismatchError{Rank: r, Peer: r, Local: h, LocalBytes: n, Remote: m.h, RemoteBytes: len(m.p)}
	}
	for off := 0; off < n; off += s.c.cfg.SlotSize {
		sink.Consume(off, m.p[off:min(off+s.c.cfg.SlotSize, n)])
	}
	s.done <- nil
	return nil
}
