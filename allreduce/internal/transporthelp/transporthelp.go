// Package transporthelp holds what the transports' own tests share
// beyond the conformance suite (package transporttest): dialing a world
// of ranks in one process (DialAll); running the test binary again as the
// ranks of a multi-process job (StartRanks, RunRanks, RankMain,
// JoinFromEnv), the jobs those ranks run (MatrixRank, LoopRank) and the
// checks on them (CheckRanks, WaitReady, KillOne); a fake peer for
// handshake tests (FakePeer); and the small fixtures of tests that block
// on a call (Go, Wait, Sink, Header).
//
// It is imported by tests only.
package transporthelp

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// DialAll runs dial(r) for every rank r < n concurrently and returns the
// endpoints by rank. If any fails, it closes the others and fails tb;
// otherwise the endpoints are closed at tb's cleanup.
func DialAll[C interface{ Close() error }](tb testing.TB, n int, dial func(ctx context.Context, r int) (C, error)) []C {
	tb.Helper()
	conns := make([]C, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[r], errs[r] = dial(context.Background(), r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for q, c := range conns {
				if errs[q] == nil {
					_ = c.Close()
				}
			}
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	tb.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return conns
}

// Go runs fn on its own goroutine; its error arrives on the channel.
func Go(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// Wait returns what ch delivers, failing t if nothing arrives within d.
func Wait(t *testing.T, ch <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		return nil
	}
}

// Sink collects the bytes it is handed in Got; it reduces (it is not a
// transport.Placer).
type Sink struct{ Got []byte }

// Consume appends p at off.
func (s *Sink) Consume(off int, p []byte) { s.Got = append(s.Got[:off], p...) }

// Header is a header of step step of a collective of 4 elements.
func Header(step uint32) transport.Header {
	return transport.Header{Group: 1, Seq: 2, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 4, Step: step}
}
