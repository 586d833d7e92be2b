package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

var secret = []byte("collective test secret")

// tcpConns dials n ranks over loopback in this process.
func tcpConns(tb testing.TB, n int, timeout time.Duration) []*tcp.Conn {
	tb.Helper()
	return tcpConnsWith(tb, n, timeout, nil)
}

// tcpConnsWith is tcpConns with mod adjusting each rank's config. The
// ranks are closed at cleanup.
func tcpConnsWith(tb testing.TB, n int, timeout time.Duration, mod func(*tcp.Config)) []*tcp.Conn {
	tb.Helper()
	store := rendezvous.NewMemStore()
	return transporthelp.DialAll(tb, n, func(ctx context.Context, r int) (*tcp.Conn, error) {
		cfg := tcp.Config{
			Rank: r, Size: n, Store: store, Secret: secret,
			Timeout: timeout, ConnectTimeout: 20 * time.Second,
		}
		if mod != nil {
			mod(&cfg)
		}
		return tcp.Dial(ctx, cfg)
	})
}

// tcpConnect is a MatrixConfig.Connect: n ranks over loopback.
func tcpConnect(tb testing.TB, n int) []transport.Conn {
	return allreducetest.Conns(tcpConns(tb, n, 20*time.Second))
}

// tcpHugeLen is the large length of the tcp matrix: 1 MiB of float32,
// several frames and ring chunks per message.
const tcpHugeLen = allreducetest.ReducedHugeLen

// TestCollectivesOverTCP is the collective matrix of allreducetest (the
// suite the in-process ranks run in full) reduced for TCP ranks in one
// process on loopback (allreducetest.ReducedMatrix).
func TestCollectivesOverTCP(t *testing.T) {
	allreducetest.Matrix(t, allreducetest.ReducedMatrix(tcpConnect))
}

// TestGroupMismatchOverTCP: ranks calling different collectives both fail
// with the mismatch, not a hang.
func TestGroupMismatchOverTCP(t *testing.T) {
	for _, n := range []int{2, 3} {
		conns := allreducetest.Conns(tcpConns(t, n, 10*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
			buf := make([]float32, 1000)
			if g.Rank() == 1 {
				return allreduce.Broadcast(ctx, g, buf, 0)
			}
			return allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
		})
		cancel()
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("n=%d: took %v", n, el)
		}
		for r, err := range errs {
			mism := errors.Is(err, transport.ErrMismatch) ||
				(errors.Is(err, transport.ErrPeer) && strings.Contains(err.Error(), "mismatch"))
			if !mism {
				t.Errorf("n=%d rank %d: %v, want a mismatch error", n, r, err)
			} else {
				t.Logf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}

// TestKillMidAllReduce: a rank whose connections drop in the middle of an
// all-reduce makes every other rank fail promptly, long before the timeout.
func TestKillMidAllReduce(t *testing.T) {
	const n, victim = 4, 2
	const timeout = 20 * time.Second
	conns := tcpConns(t, n, timeout)
	errs, returned := allreducetest.KillMidAllReduce(allreducetest.Conns(conns), victim, func() { tcp.Kill(conns[victim]) })
	for r, err := range errs {
		if r == victim {
			continue
		}
		if !errors.Is(err, transport.ErrPeer) {
			t.Errorf("rank %d: %v, want a peer failure", r, err)
		}
		if returned[r] > timeout/4 {
			t.Errorf("rank %d failed %v after the kill", r, returned[r])
		}
		t.Logf("rank %d after %v: %v", r, returned[r], err)
	}
}

// TestMissingRank: a rank that never calls the collective the others are
// in is named, with the call, in every other rank's error, whichever rank
// gives up first; for the ring, the doubling and the tree, and on odd and
// even worlds.
func TestMissingRank(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		n, missing int
		algo       allreduce.Algorithm
	}{{4, 1, allreduce.Ring}, {5, 3, allreduce.Ring}, {4, 2, allreduce.Doubling}, {3, 0, allreduce.Tree}} {
		t.Run(fmt.Sprintf("n=%d/missing=%d/%v", tc.n, tc.missing, tc.algo), func(t *testing.T) {
			t.Parallel()
			conns := tcpConns(t, tc.n, timeout)
			if err := allreducetest.MissingRank(allreducetest.Conns(conns), tc.missing, 1<<16, timeout, allreduce.WithAlgorithm(tc.algo)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestShiftOverTCP is allreducetest.ShiftSuite over loopback tcp: 1 to 5
// ranks, buffers past the segment size among them.
func TestShiftOverTCP(t *testing.T) {
	allreducetest.ShiftSuite(t, tcpConnect, []int{1, 2, 3, 4, 5}, true)
}
