package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/inproc"
)

// TestAgreeAll: the flag of any one rank reaches every rank, on group
// sizes that are and are not powers of two; no flag, no rank says so.
func TestAgreeAll(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, who := range []int{-1, 0, n - 1, n / 2} {
			w, err := inproc.NewWorld(n)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got := make([]bool, n)
			var wg sync.WaitGroup
			for r, c := range w.Endpoints() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					got[r], err = agreeAll(ctx, c, pingGroup, 3, 1, r == who)
					require.NoError(t, err)
				}()
			}
			wg.Wait()
			cancel()
			for r := range got {
				require.Equal(t, who >= 0, got[r], "n=%d, flag on rank %d: rank %d", n, who, r)
			}
		}
	}
}

// TestPaceNote: a record whose rounds agreed says nothing; one with
// rounds added names the sizes and the spread.
func TestPaceNote(t *testing.T) {
	sizes := []int{1 << 10, 1 << 20}
	require.Empty(t, (&paceRecord{rounds: []int{3, 3}, spread: []float64{1.1, 1.2}}).note(sizes, 3))
	require.Empty(t, (*paceRecord)(nil).note(sizes, 3))
	note := (&paceRecord{rounds: []int{3, 9}, spread: []float64{1.1, 2.5}}).note(sizes, 3)
	require.Contains(t, note, "2.50x the fastest (at 1MiB)")
	require.Contains(t, note, "1MiB (9)")
	require.True(t, pacesDiffer([]float64{1, 1.6}))
	require.False(t, pacesDiffer([]float64{1, 1.4, 1.2}))
}

// TestSharedSteps: the every-rank ring's slowdown is the median of its
// ratios to the one-rank ring at the large sizes, so one noisy size does
// not decide NICs.
func TestSharedSteps(t *testing.T) {
	sizes := []int{8, 1 << 20, 2 << 20, 4 << 20}
	large := sizes[1:]
	inter := []float64{1e-4, 0.01, 0.02, 0.12} // 4 MiB: a slow round
	all := []float64{0.02, 0.04, 0.08}
	single, shared := sharedSteps(sizes, large, inter, all)
	require.Equal(t, 1.0, single)
	require.InDelta(t, 2.0, shared, 1e-12)
	require.Equal(t, 1, fitNICs(2, single, shared))
	_, none := sharedSteps(sizes, nil, inter, nil)
	require.Zero(t, none)
	require.Zero(t, fitNICs(2, 0, 0))
}
