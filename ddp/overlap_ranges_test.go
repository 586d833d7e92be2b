package ddp_test

import (
	"fmt"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
)

// TestOptimizerInBackwardInParts: with each algorithm that reports the
// parts of a bucket as they become final (allreduce.AllReduceRanges: the
// ring, whose last bucket goes as a reduce-scatter and an all-gather with
// the agreement's values; halving-doubling; direct) and one that reports
// only at the end (tree), updating each part as it is reported gives
// bitwise the parameters and state of the separate Step, over 3 and 4
// ranks, many buckets and one; the 784-256-128-10 MLP cuts its first
// layer's parts into several spans. About 1 s; under -short the tree and
// the large MLP are left out, and under the race detector (about 1 s
// there) only the ring and direct on 4 ranks with one bucket run.
func TestOptimizerInBackwardInParts(t *testing.T) {
	algos := []allreduce.Algorithm{allreduce.Ring, allreduce.HalvingDoubling, allreduce.Direct, allreduce.Tree}
	ranks, buckets, large := []int{3, 4}, []int{64, 1 << 20}, true
	switch {
	case raceEnabled:
		algos = []allreduce.Algorithm{allreduce.Ring, allreduce.Direct}
		ranks, buckets, large = ranks[1:], buckets[1:], false
	case testing.Short():
		algos, large = algos[:3], false
	}
	for _, algo := range algos {
		for _, n := range ranks {
			for _, bucket := range buckets {
				optName := []string{"sgd", "adamw"}[n%2]
				t.Run(fmt.Sprintf("%v/%s/ranks=%d/bucket=%d", algo, optName, n, bucket), func(t *testing.T) {
					run := inprocRanks(allreduce.WithAlgorithm(algo))
					want := trainOverlapOn(t, run, "mlp-odd", optName, n, 2, bucket, false)
					got := trainOverlapOn(t, run, "mlp-odd", optName, n, 2, bucket, true)
					requireSameTraining(t, want, got)
				})
			}
		}
	}
	if large {
		t.Run("mlp/ring/adam/ranks=4", func(t *testing.T) {
			run := inprocRanks(allreduce.WithAlgorithm(allreduce.Ring))
			want := trainOverlapOn(t, run, "mlp", "adam", 4, 2, 25<<20, false)
			got := trainOverlapOn(t, run, "mlp", "adam", 4, 2, 25<<20, true)
			requireSameTraining(t, want, got)
		})
	}
}

// requireSameTraining: every rank's parameters and optimizer state are
// bitwise those of want.
func requireSameTraining(t *testing.T, want, got []trained) {
	t.Helper()
	for r := range got {
		requireSameBits(t, fmt.Sprintf("rank %d parameters", r), want[r].params, got[r].params)
		requireSameState(t, want[r].state, got[r].state)
	}
}
