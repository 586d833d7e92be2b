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
