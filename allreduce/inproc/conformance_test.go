package inproc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

func newWorld(t *testing.T, n int, timeout time.Duration) (*inproc.World, []transport.Conn) {
	t.Helper()
	w, err := inproc.NewWorld(n, inproc.WithTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	conns := make([]transport.Conn, n)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	return w, conns
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
		_, conns := newWorld(t, n, 5*time.Second)
		return conns
	})
}

// The fixtures of tests that block on a call, shared with package sim's
// tests.
var (
	goErr = transporthelp.Go
	wait  = transporthelp.Wait
	hdr   = transporthelp.Header
)

type sink = transporthelp.Sink

func TestNewWorldInvalid(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := inproc.NewWorld(n)
		require.ErrorIs(t, err, transport.ErrInvalid)
	}
	w, err := inproc.NewWorld(3)
	require.NoError(t, err)
	require.Equal(t, 3, w.Size())
	conns := w.Conns()
	require.Len(t, conns, 3)
	for r, c := range conns {
		require.Same(t, w.Conn(r), c)
		require.Equal(t, r, c.LocalRank())
		require.Equal(t, 3, c.LocalSize())
	}
	conns[0] = nil // Conns returns a copy
	require.NotNil(t, w.Conns()[0])
	require.NoError(t, w.Close())
}

func TestSetFaultInvalidLink(t *testing.T) {
	w, _ := newWorld(t, 2, time.Second)
	for _, l := range [][2]int{{-1, 0}, {0, 2}, {2, 0}, {0, -5}} {
		require.ErrorIs(t, w.SetFault(l[0], l[1], inproc.Fault{Drop: true}), transport.ErrInvalid, "link %v", l)
	}
}

func TestWorldTimeout(t *testing.T) {
	_, conns := newWorld(t, 2, 100*time.Millisecond)
	start := time.Now()
	err := wait(t, goErr(func() error { return conns[0].Recv(context.Background(), 1, hdr(0), 4, &sink{}) }), 5*time.Second)
	require.ErrorIs(t, err, transport.ErrTimeout)
	var te *transport.TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, 1, te.Peer)
	require.Equal(t, "recv", te.What)
	require.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond)

	// A send nobody receives times out too.
	err = wait(t, goErr(func() error { return conns[1].Send(context.Background(), 0, hdr(0), []byte{1, 2, 3, 4}) }), 5*time.Second)
	require.ErrorIs(t, err, transport.ErrTimeout)
}

func TestFaultCut(t *testing.T) {
	w, conns := newWorld(t, 3, 5*time.Second)
	ctx := context.Background()
	// A receiver blocked on the link fails when it is cut.
	blocked := goErr(func() error { return conns[1].Recv(ctx, 0, hdr(0), 4, &sink{}) })
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{Cut: true}))
	err := wait(t, blocked, 2*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	require.Contains(t, err.Error(), "cut")
	// The sender fails at once.
	err = wait(t, goErr(func() error { return conns[0].Send(ctx, 1, hdr(0), []byte{1, 2, 3, 4}) }), 2*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	// Cut is permanent: the zero Fault does not heal it.
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{}))
	err = wait(t, goErr(func() error { return conns[0].Send(ctx, 1, hdr(0), []byte{1, 2, 3, 4}) }), 2*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	// Other links still work, including the reverse direction.
	for _, l := range [][2]int{{1, 0}, {0, 2}, {2, 1}} {
		s := &sink{}
		sent := goErr(func() error { return conns[l[0]].Send(ctx, l[1], hdr(1), []byte{5, 6, 7, 8}) })
		require.NoError(t, wait(t, goErr(func() error { return conns[l[1]].Recv(ctx, l[0], hdr(1), 4, s) }), 2*time.Second), "link %v", l)
		require.NoError(t, wait(t, sent, 2*time.Second))
		require.Equal(t, []byte{5, 6, 7, 8}, s.Got)
	}
}

func TestFaultDrop(t *testing.T) {
	w, conns := newWorld(t, 2, 200*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{Drop: true}))
	// Send reports success; the message never arrives.
	require.NoError(t, wait(t, goErr(func() error { return conns[0].Send(ctx, 1, hdr(0), []byte{1, 2, 3, 4}) }), 2*time.Second))
	err := wait(t, goErr(func() error { return conns[1].Recv(ctx, 0, hdr(0), 4, &sink{}) }), 2*time.Second)
	require.ErrorIs(t, err, transport.ErrTimeout)
	// Healed, the link delivers again.
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{}))
	s := &sink{}
	sent := goErr(func() error { return conns[0].Send(ctx, 1, hdr(1), []byte{9, 9, 9, 9}) })
	require.NoError(t, wait(t, goErr(func() error { return conns[1].Recv(ctx, 0, hdr(1), 4, s) }), 2*time.Second))
	require.NoError(t, wait(t, sent, 2*time.Second))
	require.Equal(t, []byte{9, 9, 9, 9}, s.Got)
}

func TestFaultErr(t *testing.T) {
	w, conns := newWorld(t, 2, 5*time.Second)
	ctx := context.Background()
	injected := errors.New("injected-7")
	require.NoError(t, w.SetFault(1, 0, inproc.Fault{Err: injected}))
	err := wait(t, goErr(func() error { return conns[1].Send(ctx, 0, hdr(0), []byte{1}) }), 2*time.Second)
	require.ErrorIs(t, err, injected)
	// Exchange sends on the faulty link too.
	err = wait(t, goErr(func() error {
		return conns[1].(*inproc.Conn).Exchange(ctx, 0, hdr(1), []byte{1}, 0, hdr(1), 1, &sink{})
	}), 2*time.Second)
	require.ErrorIs(t, err, injected)
	// The other direction is unaffected.
	s := &sink{}
	sent := goErr(func() error { return conns[0].Send(ctx, 1, hdr(2), []byte{3}) })
	require.NoError(t, wait(t, goErr(func() error { return conns[1].Recv(ctx, 0, hdr(2), 1, s) }), 2*time.Second))
	require.NoError(t, wait(t, sent, 2*time.Second))
}

func TestFaultDelay(t *testing.T) {
	w, conns := newWorld(t, 2, 5*time.Second)
	ctx := context.Background()
	const delay = 50 * time.Millisecond
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{Delay: delay}))
	start := time.Now()
	s := &sink{}
	sent := goErr(func() error { return conns[0].Send(ctx, 1, hdr(0), []byte{1, 2, 3, 4, 5, 6, 7, 8}) })
	require.NoError(t, wait(t, goErr(func() error { return conns[1].Recv(ctx, 0, hdr(0), 8, s) }), 2*time.Second))
	require.NoError(t, wait(t, sent, 2*time.Second))
	require.GreaterOrEqual(t, time.Since(start), delay)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, s.Got)

	// A delayed send honours its context.
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{Delay: time.Hour}))
	cctx, cancel := context.WithCancel(ctx)
	res := goErr(func() error { return conns[0].Send(cctx, 1, hdr(1), []byte{1}) })
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.ErrorIs(t, wait(t, res, 2*time.Second), context.Canceled)
}

func TestKill(t *testing.T) {
	w, conns := newWorld(t, 3, 5*time.Second)
	ctx := context.Background()
	blocked := goErr(func() error { return conns[0].Recv(ctx, 2, hdr(0), 4, &sink{}) })
	time.Sleep(20 * time.Millisecond)
	w.Kill(2, errors.New("oom-killed"))
	err := wait(t, blocked, 2*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 2, pe.Peer)
	require.True(t, strings.Contains(err.Error(), "oom-killed"), "%v", err)
	// The killed rank's own calls fail with its cause.
	err = wait(t, goErr(func() error { return conns[2].Send(ctx, 0, hdr(0), []byte{1}) }), 2*time.Second)
	require.Error(t, err)
	require.Contains(t, err.Error(), "oom-killed")
	require.NotErrorIs(t, err, transport.ErrClosed)
	// A send to the killed rank fails.
	err = wait(t, goErr(func() error { return conns[1].Send(ctx, 2, hdr(0), []byte{1}) }), 2*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
}

// TestExchangeRecvFailureRetracts: when the receive half of an Exchange
// fails, the posted send is taken back, and the link carries later messages.
func TestExchangeRecvFailureRetracts(t *testing.T) {
	_, conns := newWorld(t, 3, 5*time.Second)
	ctx := context.Background()
	c0 := conns[0].(*inproc.Conn)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	// Rank 0 posts to 1 and waits for 2, which never sends.
	err := wait(t, goErr(func() error {
		return c0.Exchange(cctx, 1, hdr(0), []byte{1, 2, 3, 4}, 2, hdr(0), 4, &sink{})
	}), 2*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Rank 1 must not see the retracted message; it gets the next one.
	s := &sink{}
	sent := goErr(func() error { return conns[0].Send(ctx, 1, hdr(1), []byte{7, 7, 7, 7}) })
	require.NoError(t, wait(t, goErr(func() error { return conns[1].Recv(ctx, 0, hdr(1), 4, s) }), 2*time.Second))
	require.NoError(t, wait(t, sent, 2*time.Second))
	require.Equal(t, []byte{7, 7, 7, 7}, s.Got)
}
