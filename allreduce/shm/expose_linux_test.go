package shm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestExposeLimit: shm lends copies of at most MaxExposure bytes; a
// longer exposure is refused on the caller's rank before it publishes
// anything, and the direct algorithm runs longer buffers in segments of
// that size (every rank bitwise equal to the sequential reduction).
func TestExposeLimit(t *testing.T) {
	conns := shmConns(t, 3)
	limit := conns[0].MaxExposure()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conns[0].Expose(ctx, transport.Header{}, make([]byte, limit+1)); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("Expose of %d bytes: %v, want ErrInvalid", limit+1, err)
	}
	pm, max, ok := allreduce.PeerMemoryOf(conns[0])
	if !ok || pm == nil || max != limit {
		t.Fatalf("PeerMemoryOf: %v, %d, %v; want the endpoint, %d", pm, max, ok, limit)
	}
	// 2.5 segments of float64, a length not divisible by the ranks.
	n := limit/8*2 + limit/16 + 1
	errs := allreducetest.RunRanks(allreducetest.Conns(conns), func(g *allreduce.Group) error {
		if err := allreducetest.MatrixCell[float64](ctx, g, 3, n, allreduce.Sum); err != nil {
			return err
		}
		return allreducetest.MatrixCell[float32](ctx, g, 3, 2*n+5, allreduce.Avg)
	}, allreduce.WithAlgorithm(allreduce.Direct))
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestExposureHoldsMappings: an exposure keeps the views mapped until its
// Release, even when another goroutine closes or aborts the endpoint in
// between (a survivor's watch aborting its group while the direct
// algorithm copies its peers' chunks after Arrive): reading the views
// then is no fault, and Release lets the endpoint unmap. Before the hold,
// the abort unmapped the peers' files under the reader (a SIGSEGV in the
// direct all-reduce's copy, seen when a heal's grow aborted a step).
func TestExposureHoldsMappings(t *testing.T) {
	conns := shmConns(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	views := make([][][]byte, 2)
	errs := make(chan error, 2)
	for r, c := range conns {
		go func() {
			v, err := c.Expose(ctx, transport.Header{Group: 1, Seq: 1}, bytes.Repeat([]byte{byte(r + 1)}, 4096))
			views[r] = v
			errs <- err
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mapped := memfds(t)
	conns[0].Abort(errors.New("the group was aborted"))
	conns[1].Close()
	for r, v := range views {
		for q, b := range v {
			if want := bytes.Repeat([]byte{byte(q + 1)}, 4096); !bytes.Equal(b, want) {
				t.Errorf("rank %d's view of rank %d changed after the close", r, q)
			}
		}
	}
	if got := memfds(t); got != mapped {
		t.Errorf("%d memfd mappings while the exposures are open, want %d", got, mapped)
	}
	for _, c := range conns {
		if err := c.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	if got := memfds(t); got != 0 {
		t.Errorf("%d memfd mappings left after the exposures' Release", got)
	}
}
