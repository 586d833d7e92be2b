// Package selflink carries the messages a rank of a multi-process
// transport (tcp, shm) sends to itself — a ring of one, or any algorithm
// that does: the receiver's sink reads straight from the sender's buffer,
// and the send completes when the receiver is done with it, as in package
// inproc. Nothing touches the network or shared memory.
package selflink

import (
	"context"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Owner is what a Link needs of the endpoint that owns it.
type Owner struct {
	Rank    int           // the endpoint's rank (both sides of every message)
	Timeout time.Duration // how long a send or receive waits for the other side
	// Dead is closed when the endpoint closes or aborts; DeadErr is then
	// the error its calls return.
	Dead    <-chan struct{}
	DeadErr func() error
	// Piece is the size of the pieces the sink is handed (a multiple of
	// 8, as transport.Sink requires).
	Piece int
}

// Link is one endpoint's link to itself. One send and one receive may be
// in progress at a time, as the transport contract allows.
type Link struct {
	o      Owner
	posted chan msg   // capacity 1: the message on offer
	done   chan error // capacity 1: the receiver's verdict
	stimer *time.Timer
	rtimer *time.Timer
}

type msg struct {
	h transport.Header
	p []byte
}

// New makes the self link of the endpoint o describes.
func New(o Owner) *Link {
	s := &Link{
		o:      o,
		posted: make(chan msg, 1),
		done:   make(chan error, 1),
		stimer: time.NewTimer(time.Hour),
		rtimer: time.NewTimer(time.Hour),
	}
	s.stimer.Stop()
	s.rtimer.Stop()
	return s
}

// Post offers a message; the caller then waits with WaitSend.
func (s *Link) Post(h transport.Header, p []byte) {
	s.posted <- msg{h: h, p: p}
}

// WaitSend waits for the receiver's verdict; a send given up on is taken
// back, or, if the receiver already has it, waited for (it only copies).
func (s *Link) WaitSend(ctx context.Context) error {
	s.stimer.Reset(s.o.Timeout)
	defer s.stimer.Stop()
	var err error
	select {
	case v := <-s.done:
		return v
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.o.Dead:
		err = s.o.DeadErr()
	case <-s.stimer.C:
		err = &transport.TimeoutError{Peer: s.o.Rank, What: "send", After: s.o.Timeout.String()}
	}
	select {
	case <-s.posted: // taken back before the receiver saw it
	default:
		<-s.done // the receiver has it: wait until it lets go
	}
	return err
}

// Recv takes the posted message, which must carry header h and n bytes,
// and hands it to sink in pieces.
func (s *Link) Recv(ctx context.Context, h transport.Header, n int, sink transport.Sink) error {
	s.rtimer.Reset(s.o.Timeout)
	defer s.rtimer.Stop()
	var m msg
	select {
	case m = <-s.posted:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.o.Dead:
		return s.o.DeadErr()
	case <-s.rtimer.C:
		return &transport.TimeoutError{Peer: s.o.Rank, What: "recv", After: s.o.Timeout.String()}
	}
	if m.h != h || len(m.p) != n {
		r := s.o.Rank
		s.done <- &transport.MismatchError{Rank: r, Peer: r, Local: m.h, LocalBytes: len(m.p), Remote: h, RemoteBytes: n}
		return &transport.MismatchError{Rank: r, Peer: r, Local: h, LocalBytes: n, Remote: m.h, RemoteBytes: len(m.p)}
	}
	piece := max(s.o.Piece, 8)
	for off := 0; off < n; off += piece {
		sink.Consume(off, m.p[off:min(off+piece, n)])
	}
	s.done <- nil
	return nil
}
