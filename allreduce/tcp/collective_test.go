package tcp_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
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

// tcpConnsWith is tcpConns with mod adjusting each rank's config.
func tcpConnsWith(tb testing.TB, n int, timeout time.Duration, mod func(*tcp.Config)) []*tcp.Conn {
	tb.Helper()
	store := rendezvous.NewMemStore()
	conns := make([]*tcp.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := tcp.Config{
				Rank: r, Size: n, Store: store, Secret: secret,
				Timeout: timeout, ConnectTimeout: 20 * time.Second,
			}
			if mod != nil {
				mod(&cfg)
			}
			conns[r], errs[r] = tcp.Dial(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	return conns
}

// tcpConnect is a MatrixConfig.Connect: n ranks over loopback.
func tcpConnect(tb testing.TB, n int) []transport.Conn {
	return allreducetest.Conns(tcpConns(tb, n, 20*time.Second))
}

// tcpHugeLen is the large length of the tcp matrix: 1 MiB of float32,
// several frames and ring chunks per message.
const tcpHugeLen = 1<<18 + 3

// tcpHuge runs each collective, and AllReduce with each algorithm, once
// at tcpHugeLen (3 ranks, Sum, float32).
func tcpHuge(coll allreduce.Kind, _ allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
	if n != 3 || testing.Short() {
		return nil, nil
	}
	op := allreduce.Sum
	if coll == allreduce.KindAllGather || coll == allreduce.KindBroadcast {
		op = 0
	}
	return []allreduce.ReduceOp{op}, []allreduce.DType{allreduce.Float32}
}

// TestCollectivesOverTCP is the collective matrix of allreducetest (the
// suite the in-process ranks run in full) reduced for TCP ranks in one
// process on loopback: ranks 1..5, lengths {0, 1, N-1, N, N+1, 1000},
// {Sum, Max} × {float32, int64}, every AllReduce algorithm tcp can run,
// every collective once at 2^18+3 elements on 3 ranks; sync, async,
// repeated and aliased, Broadcast and Reduce from every root.
func TestCollectivesOverTCP(t *testing.T) {
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect: tcpConnect,
		Ranks:   []int{1, 2, 3, 4, 5},
		Ops:     []allreduce.ReduceOp{allreduce.Sum, allreduce.Max},
		DTypes:  []allreduce.DType{allreduce.Float32, allreduce.Int64},
		Huge:    tcpHuge,
		HugeLen: tcpHugeLen,
	})
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var killedAt time.Time
	var mu sync.Mutex
	returned := make([]time.Duration, n)
	errs := allreducetest.RunRanks(allreducetest.Conns(conns), func(g *allreduce.Group) error {
		r := g.Rank()
		buf := make([]float32, 1<<20)
		for i := 0; ; i++ {
			if r == victim && i == 3 {
				time.Sleep(5 * time.Millisecond) // be in the middle of the next one
				mu.Lock()
				killedAt = time.Now()
				mu.Unlock()
				tcp.Kill(conns[victim])
				return nil
			}
			if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
				mu.Lock()
				returned[r] = time.Since(killedAt)
				mu.Unlock()
				return err
			}
		}
	})
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
