package allreduce_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// TestAllGatherVAsync: the Work of AllGatherVAsync gathers what
// AllGatherV gathers (uneven counts, an empty chunk among them; a
// synchronous collective issued after it on the same group runs after
// it), and bad counts fail the Work at once, naming the count, and abort
// the group.
func TestAllGatherVAsync(t *testing.T) {
	counts := []int{3, 0, 5}
	total := 8
	errs := allreducetest.RunInproc(len(counts), 10*time.Second, func(g *allreduce.Group) error {
		ctx := context.Background()
		r := g.Rank()
		mine := make([]float64, counts[r])
		for i := range mine {
			mine[i] = float64(r*100 + i)
		}
		async, sync := make([]float64, total), make([]float64, total)
		w := allreduce.AllGatherVAsync(ctx, g, async, mine, counts)
		if err := allreduce.AllGatherV(ctx, g, sync, mine, counts); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		for i := range sync {
			if async[i] != sync[i] {
				return fmt.Errorf("rank %d: element %d is %v async, %v sync", r, i, async[i], sync[i])
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// In a world of its own: the abort reaches the other ranks.
	errs = allreducetest.RunInproc(len(counts), 10*time.Second, func(g *allreduce.Group) error {
		ctx := context.Background()
		r := g.Rank()
		mine, all := make([]float64, counts[r]), make([]float64, total)
		bad := allreduce.AllGatherVAsync(ctx, g, all, mine, []int{3, -1, 6})
		select {
		case <-bad.Done():
		default:
			return fmt.Errorf("rank %d: bad counts: the Work is not done at once", r)
		}
		if err := bad.Err(); err == nil || !strings.Contains(err.Error(), "chunk count -1 of rank 1 is negative") {
			return fmt.Errorf("rank %d: bad counts: %v", r, err)
		}
		if err := allreduce.AllGatherV(ctx, g, all, mine, counts); err == nil {
			return fmt.Errorf("rank %d: the group works after bad counts, want it aborted", r)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
