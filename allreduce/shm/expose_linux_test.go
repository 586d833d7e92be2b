package shm_test

import (
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
