package allreduce_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// A synchronous AllReduce allocates nothing once a group has run one of
// its size, on every rank together, with each algorithm in-process ranks
// run without sub-groups.
func TestSyncAllReduceAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring, allreduce.Doubling, allreduce.Direct, allreduce.Tree, allreduce.HalvingDoubling} {
		for _, count := range []int{2, 100000} {
			const n, runs = 4, 50
			conns, _, err := allreducetest.InprocConns(n, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			groups := allreducetest.Groups(t, conns, allreduce.WithAlgorithm(algo))
			ctx := context.Background()
			bufs := make([][]float32, n)
			for r := range bufs {
				bufs[r] = make([]float32, count)
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for r := 1; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range runs + 2 { // AllocsPerRun's warm-up, the runs, and our own warm-up
						if err := allreduce.AllReduce(ctx, groups[r], bufs[r], allreduce.Sum); err != nil {
							errs[r] = err
							return
						}
					}
				}()
			}
			if err := allreduce.AllReduce(ctx, groups[0], bufs[0], allreduce.Sum); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(runs, func() {
				if err := allreduce.AllReduce(ctx, groups[0], bufs[0], allreduce.Sum); err != nil {
					t.Error(err)
				}
			})
			wg.Wait()
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
			if allocs != 0 {
				t.Errorf("%v, %d elements: %.1f allocations per AllReduce over %d ranks", algo, count, allocs, n)
			}
		}
	}
}
