//go:build linux

package mixed_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

var secret = []byte("mixed transport test secret 0123")

// A layout places n ranks on simulated hosts: host(n, r) names rank r's.
type layout struct {
	name string
	host func(n, r int) int
}

var (
	// blocks: ranks 0,1 on host 0, 2,3 on host 1, 4 on host 2 (2 hosts ×
	// 2 ranks at 4; 2 + 1 at 3).
	blocks = layout{"blocks", func(_, r int) int { return r / 2 }}
	// interleaved: even ranks on host 0, odd on host 1, so every ring
	// step crosses hosts (2 hosts × 2 at 4, 2 + 1 at 3).
	interleaved = layout{"interleaved", func(_, r int) int { return r % 2 }}
	// lonely: rank 0 alone on host 0, the others on host 1 (1 + 2 at 3,
	// 1 + 3 at 4).
	lonely = layout{"lonely", func(_, r int) int { return min(r, 1) }}
)

func hostsOf(l layout, n int) []string {
	h := make([]string, n)
	for r := range h {
		h[r] = fmt.Sprintf("host%d", l.host(n, r))
	}
	return h
}

// dialLayout dials n ranks in this process, each given the host l
// names; the shm worlds among each host's ranks are real (memfds, Unix
// sockets), as is the tcp mesh of all. Closed at cleanup.
func dialLayout(tb testing.TB, l layout, n int) []*mixed.Conn {
	tb.Helper()
	return dialLayoutTimeout(tb, l, n, 8*time.Second)
}

// dialLayoutTimeout is dialLayout with the transports' timeout.
func dialLayoutTimeout(tb testing.TB, l layout, n int, timeout time.Duration) []*mixed.Conn {
	tb.Helper()
	store := rendezvous.NewMemStore()
	hosts := hostsOf(l, n)
	return transporthelp.DialAll(tb, n, func(ctx context.Context, r int) (*mixed.Conn, error) {
		return mixed.Dial(ctx, mixed.Config{
			World: tcp.Config{Rank: r, Size: n, Store: store, Secret: secret, Node: hosts[r],
				Timeout: timeout, ConnectTimeout: 20 * time.Second},
			Hosts: hosts,
			Shm:   shm.Config{Slots: 4, SlotSize: 64 << 10},
		})
	})
}

func TestConformance(t *testing.T) {
	for _, l := range []layout{blocks, interleaved} {
		t.Run(l.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
				return allreducetest.Conns(dialLayout(t, l, n))
			})
		})
	}
}

// TestCollectives is the reduced collective matrix on 3 and 4 ranks in
// each layout (2 × 2, 2 + 1, 1 + 2, 1 + 3 ranks per host).
func TestCollectives(t *testing.T) {
	for _, l := range []layout{blocks, interleaved, lonely} {
		t.Run(l.name, func(t *testing.T) {
			cfg := allreducetest.ReducedMatrix(func(tb testing.TB, n int) []transport.Conn {
				return allreducetest.Conns(dialLayout(tb, l, n))
			})
			cfg.Ranks = []int{3, 4}
			cfg.Timeout = 2 * time.Minute
			if l.name != blocks.name {
				cfg.Huge = nil // the huge cells once, in blocks
				cfg.SyncOnly = true
			}
			allreducetest.Matrix(t, cfg)
		})
	}
}

// TestShift is allreducetest.ShiftSuite on 3 and 4 ranks in each
// layout: every offset crosses hosts for some ranks and not for others.
func TestShift(t *testing.T) {
	for _, l := range []layout{blocks, interleaved, lonely} {
		t.Run(l.name, func(t *testing.T) {
			allreducetest.ShiftSuite(t, func(tb testing.TB, n int) []transport.Conn {
				return allreducetest.Conns(dialLayout(tb, l, n))
			}, []int{3, 4}, l.name == blocks.name)
		})
	}
}

// TestRoutes: a message between ranks of one host goes through the shm
// endpoint (its local ranks), one between hosts through tcp; the
// composite reports its host's ranks.
func TestRoutes(t *testing.T) {
	conns := dialLayout(t, interleaved, 4) // hosts: {0, 2}, {1, 3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r, c := range conns {
		want := []int{r % 2, r%2 + 2}
		if got := c.Members(); fmt.Sprint(got) != fmt.Sprint(want) || c.LocalRank() != r/2 || c.LocalSize() != 2 {
			t.Errorf("rank %d: members %v, local rank %d of %d; want %v, %d of 2", r, got, c.LocalRank(), c.LocalSize(), want, r/2)
		}
		if c.NodeName() != fmt.Sprintf("host%d", r%2) {
			t.Errorf("rank %d: node %q", r, c.NodeName())
		}
		if _, ok := c.Local().(*shm.Conn); !ok {
			t.Errorf("rank %d: local endpoint %T", r, c.Local())
		}
	}
	h := transporthelp.Header(0)
	// World rank 2 is rank 1 of host 0's shm world.
	sent := transporthelp.Go(func() error { return conns[0].Send(ctx, 2, h, []byte("over shm")) })
	var s transporthelp.Sink
	if err := conns[2].Local().Recv(ctx, 0, h, 8, &s); err != nil || string(s.Got) != "over shm" {
		t.Fatalf("shm endpoint of rank 2: %q, %v", s.Got, err)
	}
	if err := transporthelp.Wait(t, sent, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	sent = transporthelp.Go(func() error { return conns[0].Send(ctx, 1, h, []byte("over tcp")) })
	s = transporthelp.Sink{}
	if err := conns[1].World().Recv(ctx, 0, h, 8, &s); err != nil || string(s.Got) != "over tcp" {
		t.Fatalf("tcp endpoint of rank 1: %q, %v", s.Got, err)
	}
	if err := transporthelp.Wait(t, sent, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsNameWorldRanks: the shm endpoint's errors (mismatch, abort,
// timeout) reach the caller with world ranks, and an abort whose
// mismatch names ranks beyond the host's shm world still carries it.
func TestErrorsNameWorldRanks(t *testing.T) {
	conns := dialLayout(t, interleaved, 4) // hosts: {0, 2}, {1, 3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Mismatch between world ranks 3 and 1 (local 1 and 0 of host 1).
	sent := transporthelp.Go(func() error { return conns[3].Send(ctx, 1, transporthelp.Header(7), make([]byte, 8)) })
	err := conns[1].Recv(ctx, 3, transporthelp.Header(8), 8, &transporthelp.Sink{})
	var mm *transport.MismatchError
	if !errors.As(err, &mm) || mm.Rank != 1 || mm.Peer != 3 {
		t.Errorf("receiver: %v, want a mismatch of ranks 1 and 3", err)
	}
	err = transporthelp.Wait(t, sent, 5*time.Second)
	if err == nil { // the send was in the ring before the nack: the next call fails
		err = conns[3].Send(ctx, 1, transporthelp.Header(9), make([]byte, 8))
	}
	if !errors.As(err, &mm) || mm.Rank != 3 || mm.Peer != 1 {
		t.Errorf("sender: %v, want a mismatch of ranks 3 and 1", err)
	}

	// Rank 2 (local 1 of host 0) aborts over a mismatch between ranks 3
	// and 1, which its shm world of 2 does not have.
	blocked := transporthelp.Go(func() error { return conns[0].Recv(ctx, 2, transporthelp.Header(0), 8, &transporthelp.Sink{}) })
	time.Sleep(20 * time.Millisecond)
	conns[2].Abort(fmt.Errorf("collective failed: %w", &transport.MismatchError{Rank: 3, Peer: 1, LocalBytes: 8, RemoteBytes: 16}))
	err = transporthelp.Wait(t, blocked, 5*time.Second)
	var pe *transport.PeerError
	var ae *mpconn.AbortError
	switch {
	case !errors.As(err, &pe) || pe.Peer != 2:
		t.Errorf("abort: %v, want a PeerError naming rank 2", err)
	case !errors.As(err, &ae) || ae.Rank != 2 || ae.Detail == nil || ae.Detail.Rank != 3 || ae.Detail.Peer != 1:
		t.Errorf("abort: %v (%#v), want rank 2's abort carrying the mismatch of ranks 3 and 1", err, ae)
	case !errors.Is(err, transport.ErrMismatch):
		t.Errorf("abort: %v does not unwrap to ErrMismatch", err)
	}
}

// TestTimeoutNamesWorldRank: a receive from a silent rank of this host
// times out naming its world rank.
func TestTimeoutNamesWorldRank(t *testing.T) {
	store := rendezvous.NewMemStore()
	hosts := hostsOf(interleaved, 3) // {0, 2}, {1}
	conns := transporthelp.DialAll(t, 3, func(ctx context.Context, r int) (*mixed.Conn, error) {
		return mixed.Dial(ctx, mixed.Config{
			World: tcp.Config{Rank: r, Size: 3, Store: store, Secret: secret, Node: hosts[r],
				Timeout: 300 * time.Millisecond, ConnectTimeout: 20 * time.Second},
			Hosts: hosts,
		})
	})
	if conns[1].Local() != nil || conns[1].LocalSize() != 1 {
		t.Errorf("rank 1, alone on its host: local endpoint %T, %d local ranks", conns[1].Local(), conns[1].LocalSize())
	}
	err := conns[0].Recv(context.Background(), 2, transporthelp.Header(0), 8, &transporthelp.Sink{})
	var te *transport.TimeoutError
	if !errors.As(err, &te) || te.Peer != 2 {
		t.Errorf("%v, want a timeout naming rank 2", err)
	}
}

// TestMissingRank: a rank that never calls the collective the others are
// in is named, with the call, in every other rank's error, whether the
// ranks that wait for it share its host (shm) or not (tcp): the stall
// notices travel over the world endpoint.
func TestMissingRank(t *testing.T) {
	const timeout = time.Second
	for _, l := range []layout{blocks, interleaved} {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			conns := dialLayoutTimeout(t, l, 4, timeout)
			if err := allreducetest.MissingRank(allreducetest.Conns(conns), 1, 1<<16, timeout, allreduce.WithAlgorithm(allreduce.Ring)); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestHostRunID(t *testing.T) {
	if got := mixed.HostRunID("", 4); got != "default/host/4" {
		t.Errorf("HostRunID(\"\", 4) = %q", got)
	}
	long := string(make([]byte, 250))
	for i := range []byte(long) {
		long = long[:i] + "x" + long[i+1:]
	}
	if got := mixed.HostRunID(long, 12); len(got) > 255 || got == mixed.HostRunID(long+"y", 12) {
		t.Errorf("HostRunID of a long id: %q", got)
	}
}
