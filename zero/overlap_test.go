package zero_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// TestShardUpdateInBackwardBitwise: ZeRO-1 with each bucket's piece updated
// as soon as its reduce-scatter completes gives bitwise the parameters and
// the (gathered) optimizer state of ZeRO-1's separate shard update, for
// SGD, Adam and AdamW, 1 to 4 ranks, odd parameter sizes and every bucket
// layout.
func TestShardUpdateInBackwardBitwise(t *testing.T) {
	ranks := []int{1, 2, 3, 4}
	if testing.Short() {
		ranks = []int{1, 3}
	}
	forZeroCases(t, []string{"sgd", "adam", "adamw"}, ranks, func(t *testing.T, base run) {
		want := train(t, base)
		ib := base
		ib.inBackward = true
		got := train(t, ib)
		require.Equal(t, want.params, got.params)
		require.Equal(t, want.fullState, got.fullState)
		// And DDP's optimizer in backward is the same again.
		dp := ib
		dp.zero1 = false
		require.Equal(t, want.params, train(t, dp).params)
	})
}

// forZeroCases runs f as a subtest for every optimizer of opts, bucket
// layout and world size of ranks, on base: ZeRO-1 over the ring, 3 steps
// of mlp-odd with 2 rows per rank.
func forZeroCases(t *testing.T, opts []string, ranks []int, f func(t *testing.T, base run)) {
	for _, opt := range opts {
		for _, layout := range bucketLayouts {
			for _, n := range ranks {
				t.Run(fmt.Sprintf("%s/buckets=%s/ranks=%d", opt, layout.name, n), func(t *testing.T) {
					f(t, run{kind: "mlp-odd", opt: opt, ranks: n, perRank: 2, steps: 3, zero1: true,
						opts: []ddp.Option{layout.opt}, algo: allreduce.Ring})
				})
			}
		}
	}
}

// TestShardUpdateInBackwardRefusesAnotherOptimizer: the optimizer in
// backward must be the shard's own.
func TestShardUpdateInBackwardRefusesAnotherOptimizer(t *testing.T) {
	errs := allreducetest.RunInproc(1, 10*time.Second, func(g *allreduce.Group) error {
		n := traintest.Build[float64](t, "mlp-odd", 2, nil)
		opt := traintest.NewOpt[float64](t, "sgd")
		other := traintest.NewOpt[float64](t, "sgd")
		_, err := zero.Wrap[float64](context.Background(), g, n.Params, opt, ddp.WithOptimizerInBackward[float64](other.(optim.Ranged[float64])))
		require.ErrorContains(t, err, "must be the shard's optimizer")
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}
