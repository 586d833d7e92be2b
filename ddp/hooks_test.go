package ddp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
)

// Gradients arrive in reverse layer order and the first bucket goes to
// communication while later gradients are still being computed.
func TestHooksFireMidBackward(t *testing.T) {
	errs := allreducetest.RunInproc(2, 20*time.Second, func(g *allreduce.Group) error {
		// First bucket 1 KiB: the last layer's bias alone.
		n, d := traintest.BuildNet[float32](t, "mlp", 4, g, ddp.WithBucketBytes(1<<10, 1<<20))
		x, y := traintest.BatchData[float32](0, 8)
		xr, yr := traintest.Rows(x, y, g.Rank(), 4)
		traintest.SetInput(t, n, xr, yr)
		require.NoError(t, d.Run(context.Background(), n.VM))
		order := d.HookOrder()
		require.ElementsMatch(t, []int{0, 1, 2, 3}, order, "every parameter's hook fired once")
		// MLP learnables are w0, b0, w1, b1: layer 1's gradients come first.
		pos := map[int]int{}
		for k, p := range order {
			pos[p] = k
		}
		require.Less(t, pos[2], pos[0], "w1 before w0")
		require.Less(t, pos[3], pos[0], "b1 before w0")
		require.Less(t, pos[3], pos[1], "b1 before b0")
		st := d.LastStats()
		require.Greater(t, st.HooksAfterFirstBucket, 0, "first bucket handed off before the backward pass ended")
		require.GreaterOrEqual(t, st.FirstBucketStart, time.Duration(0))
		require.Greater(t, st.Buckets, 1)
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// NoSync over k micro-batches then one synchronised run equals one step on
// the k-times larger batch (with SGD at lr/k, since gradients add up).
func TestNoSyncAccumulationEqualsLargeBatch(t *testing.T) {
	const ranks, micro, k, lr = 2, 2, 3, 0.1
	ctx := context.Background()
	stepWith := func(perRank int, accumulate bool) [][][]float64 {
		out := make([][][]float64, ranks)
		errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
			r := g.Rank()
			n, d := traintest.BuildNet[float64](t, "mlp", perRank, g)
			// Global batch of ranks·micro·k rows; this rank's rows are
			// [r·micro·k, (r+1)·micro·k).
			x, y := traintest.BatchData[float64](5, ranks*micro*k)
			xr, yr := traintest.Rows(x, y, r, micro*k)
			var opt optim.Optimizer[float64]
			var err error
			if accumulate {
				opt, err = optim.NewSGD[float64](optim.SGDConfig{LR: lr / k})
				require.NoError(t, err)
				for j := 0; j < k; j++ {
					traintest.SetInput(t, n, xr[j*micro*784:(j+1)*micro*784], yr[j*micro*10:(j+1)*micro*10])
					if j < k-1 {
						require.NoError(t, d.NoSync(func() error { return d.Run(ctx, n.VM) }))
						require.Zero(t, d.LastStats().Buckets, "no communication under NoSync")
					} else {
						require.NoError(t, d.Run(ctx, n.VM))
					}
				}
			} else {
				opt, err = optim.NewSGD[float64](optim.SGDConfig{LR: lr})
				require.NoError(t, err)
				traintest.SetInput(t, n, xr, yr)
				require.NoError(t, d.Run(ctx, n.VM))
			}
			require.NoError(t, d.Step(ctx, opt))
			out[r] = traintest.ParamValues[float64](n)
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
		return out
	}
	big := stepWith(micro*k, false)
	acc := stepWith(micro, true)
	for r := 0; r < ranks; r++ {
		require.LessOrEqual(t, maxRelDiff(big[r], acc[r]), 1e-12, "rank %d", r)
	}
}

func TestWrapRejectsMismatchedModels(t *testing.T) {
	errs := allreducetest.RunInproc(3, 5*time.Second, func(g *allreduce.Group) error {
		kind := "mlp"
		if g.Rank() == 2 {
			kind = "mlp-odd"
		}
		n := traintest.Build[float32](t, kind, 2, nil)
		_, err := ddp.Wrap[float32](context.Background(), g, n.Params)
		return err
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.Contains(t, err.Error(), "rank 2 has 4 parameters", "rank %d", r)
	}
}
