package transporttest

// Subtests of ending calls and endpoints: context cancellation and
// deadlines, Close, and the Aborter capability.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// cancelRecv: cancelling the context unblocks a Recv with no sender.
func (s *suite) cancelRecv(t *testing.T) {
	conns := s.conns(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goRun(func() error { return conns[0].Recv(ctx, 1, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	err := await(t, res, bound, "Recv after cancel")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Recv: got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Recv returned %v after the cancel", d)
	}
}

// deadlineRecv: a context deadline ends a Recv with no sender.
func (s *suite) deadlineRecv(t *testing.T) {
	conns := s.conns(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, header(0), 8, &recorder{}) }), bound, "Recv")
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrTimeout) {
		t.Errorf("Recv: got %v, want context.DeadlineExceeded or ErrTimeout", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 3*time.Second {
		t.Errorf("Recv returned after %v, want about the 100ms deadline", d)
	}
}

// close: Close unblocks this endpoint's pending call with ErrClosed, fails
// its later calls with ErrClosed, and peers see ErrPeer for it.
func (s *suite) close(t *testing.T) {
	conns := s.conns(t, 3)
	ctx := boundCtx(t)
	pending := goRun(func() error { return conns[0].Recv(ctx, 1, header(0), 8, &recorder{}) })
	peerBlocked := goRun(func() error { return conns[2].Recv(ctx, 0, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	if err := conns[0].Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := await(t, pending, bound, "pending Recv after Close"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("pending Recv after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, peerBlocked, bound, "peer's Recv from the closed rank"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("peer's pending Recv from the closed rank: got %v, want ErrPeer", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Send(ctx, 1, header(1), []byte{1}) }), bound, "Send"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Recv(ctx, 2, header(1), 1, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, header(1), 1, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("peer's later Recv from the closed rank: got %v, want ErrPeer", err)
	}
	if ex, ok := conns[0].(transport.Exchanger); ok {
		err := await(t, goRun(func() error {
			return ex.Exchange(ctx, 1, header(2), []byte{1}, 2, header(2), 1, &recorder{})
		}), bound, "Exchange")
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Exchange after Close: got %v, want ErrClosed", err)
		}
	}
	// Closing twice is harmless; the other ranks still talk to each other.
	_ = conns[0].Close()
	transfer(t, ctx, conns, 1, 2, [][]byte{payload(3, 33)})
}

// closePeerSend: a Send to a closed rank fails with ErrPeer.
func (s *suite) closePeerSend(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	if err := conns[1].Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	err := await(t, goRun(func() error {
		// A transport may buffer one small message; a second cannot go.
		if err := conns[0].Send(ctx, 1, header(0), payload(1, 64)); err != nil {
			return err
		}
		return conns[0].Send(ctx, 1, header(1), payload(2, 1<<20))
	}), bound, "Send to a closed rank")
	if !errors.Is(err, transport.ErrPeer) {
		t.Errorf("Send to a closed rank: got %v, want ErrPeer", err)
	}
}

// abort: Abort makes a peer blocked on this rank fail at once with ErrPeer
// carrying the cause.
func (s *suite) abort(t *testing.T) {
	conns := s.conns(t, 3)
	a, ok := conns[0].(transport.Aborter)
	if !ok {
		t.Skipf("%T does not implement transport.Aborter", conns[0])
	}
	ctx := boundCtx(t)
	blocked := goRun(func() error { return conns[1].Recv(ctx, 0, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	a.Abort(errors.New("abort-cause-31337"))
	err := await(t, blocked, bound, "Recv from an aborted rank")
	if !errors.Is(err, transport.ErrPeer) {
		t.Errorf("blocked peer: got %v, want ErrPeer", err)
	}
	if err != nil && !strings.Contains(err.Error(), "abort-cause-31337") {
		t.Errorf("blocked peer: %q does not carry the abort cause", err)
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Peer != 0 {
		t.Errorf("blocked peer: PeerError names rank %d, want 0", pe.Peer)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("blocked peer failed %v after the abort, want at once", d)
	}
	// A peer that calls later fails too, and so does the aborted rank.
	if err := await(t, goRun(func() error { return conns[2].Recv(ctx, 0, header(0), 8, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("later Recv from the aborted rank: got %v, want ErrPeer", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Send(ctx, 1, header(1), []byte{1}) }), bound, "Send"); err == nil {
		t.Errorf("Send on the aborted rank succeeded")
	}
}
