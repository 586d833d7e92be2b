package sim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

func TestDeadlockRing(t *testing.T) {
	const n = 5
	w := newWorld(t, sim.Config{Ranks: n, Timeout: time.Minute})
	start := time.Now()
	res := make([]<-chan error, n)
	for r := range n {
		c := w.Conn(r)
		h := hdr(uint32(r))
		res[r] = goErr(func() error { return c.Recv(bg, (r+1)%n, h, 8, &sink{}) })
	}
	for r := range n {
		err := wait(t, res[r], 10*time.Second)
		require.ErrorIs(t, err, transport.ErrTimeout, "rank %d", r)
		var dl *sim.DeadlockError
		require.ErrorAs(t, err, &dl)
		require.Len(t, dl.Waits, n)
		for q, wt := range dl.Waits {
			require.Equal(t, sim.Wait{Rank: q, From: (q + 1) % n, Header: hdr(uint32(q)), Bytes: 8}, wt)
		}
		require.Contains(t, err.Error(), "sim: deadlock: rank 0 waits for a message from rank 1 (group=1 seq=2 kind=1 dtype=1 op=1 root=-1 count=4 step=0, 8 bytes)")
		require.Contains(t, err.Error(), "rank 3 waits for a message from rank 4")
	}
	require.Less(t, time.Since(start), 5*time.Second, "the deadlock was found by the timeout, not at once")

	// The world works on afterwards.
	send(t, w, 0, 1, hdr(9), 4)
	recvPlace(t, w, 1, 0, hdr(9), 4)
}

func TestDeadlockMixedWithAlign(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 3, Timeout: time.Minute})
	// Rank 0 and 1 align; rank 2 waits for rank 0, which waits in the
	// barrier for rank 2.
	a0 := goErr(func() error { return w.Conn(0).AlignClocks(bg) })
	a1 := goErr(func() error { return w.Conn(1).AlignClocks(bg) })
	r2 := goErr(func() error { return w.Conn(2).Recv(bg, 0, hdr(0), 1, &sink{}) })
	for _, ch := range []<-chan error{a0, a1, r2} {
		err := wait(t, ch, 10*time.Second)
		require.ErrorIs(t, err, transport.ErrTimeout)
		require.Contains(t, err.Error(), "rank 0 waits in AlignClocks; rank 1 waits in AlignClocks; rank 2 waits for a message from rank 0")
	}
	// The barrier is usable again.
	res := make([]<-chan error, 3)
	for r := range 3 {
		c := w.Conn(r)
		res[r] = goErr(func() error { return c.AlignClocks(bg) })
	}
	for r := range 3 {
		require.NoError(t, wait(t, res[r], 10*time.Second))
	}
}

// A receive from a closed rank is a peer failure, not a deadlock.
func TestNoDeadlockOnClosedPeer(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 2, Timeout: time.Minute})
	res := goErr(func() error { return w.Conn(0).Recv(bg, 1, hdr(0), 1, &sink{}) })
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w.Conn(1).Close())
	err := wait(t, res, 10*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	require.NotErrorIs(t, err, transport.ErrTimeout)
	// A message sent before the close is still delivered.
	w = newWorld(t, sim.Config{Ranks: 2, Timeout: time.Minute})
	send(t, w, 1, 0, hdr(0), 3)
	require.NoError(t, w.Conn(1).Close())
	recvPlace(t, w, 0, 1, hdr(0), 3)
	require.ErrorIs(t, w.Conn(0).Recv(bg, 1, hdr(1), 3, &sink{}), transport.ErrPeer)
	require.ErrorIs(t, w.Conn(0).Send(bg, 1, hdr(1), []byte{1}), transport.ErrPeer)
}

func TestMismatchBothSides(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 3, Timeout: time.Minute})
	sh, rh := hdr(0), hdr(0)
	rh.Count = 99
	// The sender goes on to wait for rank 2 (alive, idle): the mismatch
	// ends that wait.
	require.NoError(t, w.Conn(0).Send(bg, 1, sh, make([]byte, 16)))
	blocked := goErr(func() error { return w.Conn(0).Recv(bg, 2, hdr(5), 1, &sink{}) })
	time.Sleep(20 * time.Millisecond)
	s := &sink{}
	err := w.Conn(1).Recv(bg, 0, rh, 8, s)
	var mm *transport.MismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, transport.MismatchError{Rank: 1, Peer: 0, Local: rh, LocalBytes: 8, Remote: sh, RemoteBytes: 16}, *mm)
	require.Empty(t, s.Got)
	err = wait(t, blocked, 10*time.Second)
	require.ErrorAs(t, err, &mm)
	require.Equal(t, transport.MismatchError{Rank: 0, Peer: 1, Local: sh, LocalBytes: 16, Remote: rh, RemoteBytes: 8}, *mm)

	// A sender not blocked gets it from its next call.
	require.NoError(t, w.Conn(2).Send(bg, 1, sh, make([]byte, 4)))
	require.ErrorIs(t, w.Conn(1).Recv(bg, 2, rh, 4, &sink{}), transport.ErrMismatch)
	require.ErrorAs(t, w.Conn(2).Send(bg, 0, hdr(1), nil), &mm)
	require.Equal(t, 2, mm.Rank)
	// Once.
	require.NoError(t, w.Conn(2).Send(bg, 0, hdr(2), nil))
}

func TestAbortThirdParty(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 3, Timeout: time.Minute})
	// Rank 1 waits for rank 2, which is alive; rank 0 aborts: rank 1 fails
	// at once with rank 0's cause.
	blocked := goErr(func() error { return w.Conn(1).Recv(bg, 2, hdr(0), 1, &sink{}) })
	time.Sleep(20 * time.Millisecond)
	w.Kill(0, errors.New("cause-4242"))
	err := wait(t, blocked, 5*time.Second)
	require.ErrorIs(t, err, transport.ErrPeer)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 0, pe.Peer)
	require.Contains(t, err.Error(), "cause-4242")
	// The aborted rank's own calls fail with its cause.
	err = w.Conn(0).Send(bg, 1, hdr(0), nil)
	require.ErrorContains(t, err, "cause-4242")
	require.NotErrorIs(t, err, transport.ErrClosed)
	// AlignClocks fails too.
	require.ErrorIs(t, w.Conn(2).AlignClocks(bg), transport.ErrPeer)
}

func TestCloseUnblocks(t *testing.T) {
	// Rank 3 stays idle, so the three waits are not a deadlock.
	w := newWorld(t, sim.Config{Ranks: 4, Timeout: time.Minute})
	recv := goErr(func() error { return w.Conn(0).Recv(bg, 1, hdr(0), 1, &sink{}) })
	ex := goErr(func() error {
		return w.Conn(1).Exchange(bg, 2, hdr(0), []byte{1}, 2, hdr(0), 1, &sink{})
	})
	align := goErr(func() error { return w.Conn(2).AlignClocks(bg) })
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w.Close())
	for _, ch := range []<-chan error{recv, ex, align} {
		err := wait(t, ch, 5*time.Second)
		require.True(t, errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrPeer), "%v", err)
	}
	require.ErrorIs(t, w.Conn(0).Send(bg, 1, hdr(0), nil), transport.ErrClosed)
	require.NoError(t, w.Close()) // twice
}

func TestContextAndTimeout(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 3, Timeout: 150 * time.Millisecond})
	ctx, cancel := context.WithCancel(bg)
	ex := goErr(func() error { return w.Conn(0).Exchange(ctx, 1, hdr(0), []byte{1}, 1, hdr(0), 1, &sink{}) })
	al := goErr(func() error { return w.Conn(2).AlignClocks(ctx) })
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.ErrorIs(t, wait(t, ex, 5*time.Second), context.Canceled)
	require.ErrorIs(t, wait(t, al, 5*time.Second), context.Canceled)
	require.ErrorIs(t, w.Conn(0).Send(ctx, 1, hdr(1), nil), context.Canceled)

	// The real-time timeout, with rank 1 alive and idle (no deadlock).
	start := time.Now()
	err := wait(t, goErr(func() error { return w.Conn(2).Recv(bg, 1, hdr(0), 1, &sink{}) }), 5*time.Second)
	require.ErrorIs(t, err, transport.ErrTimeout)
	var te *transport.TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, 1, te.Peer)
	require.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond)
}

func TestInvalidCalls(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 2})
	c := w.Conn(0)
	for _, p := range []int{-1, 2} {
		require.ErrorIs(t, c.Send(bg, p, hdr(0), nil), transport.ErrInvalid)
		require.ErrorIs(t, c.Recv(bg, p, hdr(0), 0, &sink{}), transport.ErrInvalid)
		require.ErrorIs(t, c.Exchange(bg, p, hdr(0), nil, 1, hdr(0), 0, &sink{}), transport.ErrInvalid)
		require.ErrorIs(t, c.Exchange(bg, 1, hdr(0), nil, p, hdr(0), 0, &sink{}), transport.ErrInvalid)
	}
	require.ErrorIs(t, c.Recv(bg, 1, hdr(0), -1, &sink{}), transport.ErrInvalid)
	require.ErrorIs(t, c.Recv(bg, 1, hdr(0), 4, nil), transport.ErrInvalid)
	// Nothing was sent by the failed Exchanges.
	require.NoError(t, w.Conn(1).Send(bg, 0, hdr(3), []byte{7}))
	recvPlace(t, w, 0, 1, hdr(3), 1)
	require.True(t, strings.HasPrefix(w.Conn(1).NodeName(), "node"))
}
