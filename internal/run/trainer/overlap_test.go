package trainer

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverlapOptimizerSameTraining: the optimizer applied bucket by bucket
// inside the backward pass trains bitwise the same model as the separate
// step, for SGD with momentum and for AdamW, with several buckets, under
// DDP and ZeRO-1.
func TestOverlapOptimizerSameTraining(t *testing.T) {
	for _, c := range []struct {
		o     string
		zero1 bool
	}{{OptimSGD, false}, {OptimAdamW, false}, {OptimSGD, true}} {
		o := c.o
		cfg := small()
		cfg.Optim, cfg.BucketMB, cfg.Zero1 = o, 1.0/1024, c.zero1 // 1 KiB buckets: several
		if o != OptimSGD {
			cfg.Momentum, cfg.LR = 0, 1e-3
		}
		want, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		cfg.OverlapOptimizer = true
		got, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		equalParams(t, want.Params, got.Params)
	}
}

// TestUnevenBatchesJoin: with the last rank a batch short every epoch, the
// run finishes (no hang) with every rank at the same global step as an
// even run, a trained model, and a model other than the even run's (the
// short rank's last batch is missing from its last step's mean).
func TestUnevenBatchesJoin(t *testing.T) {
	cfg := small()
	cfg.Ranks = 4
	even, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	cfg.UnevenBatches = 2
	got, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, even.GlobalStep, got.GlobalStep)
	require.Len(t, got.Epochs, cfg.Epochs)
	diff := 0.0
	for i := range got.Params {
		for j, v := range got.Params[i].Data {
			require.False(t, math.IsNaN(v))
			diff = math.Max(diff, math.Abs(v-even.Params[i].Data[j]))
		}
	}
	require.Greater(t, diff, 0.0)
	require.Less(t, diff, 0.5)

	bad := small()
	bad.UnevenBatches, bad.Zero1, bad.ZeroBuddies = 1, true, true
	require.ErrorContains(t, bad.Validate(), "uneven-batches")
	bad.ZeroBuddies, bad.OverlapOptimizer = false, true
	require.ErrorContains(t, bad.Validate(), "uneven-batches")
}

// TestUnevenBatchesJoinZeRO1: ZeRO-1 under Join (the short rank shadows
// with zeros and keeps updating its shard) ends where DDP under Join ends
// (which takes the root's parameters and optimizer state at the epoch's
// end), to within float32 rounding of the two reduction orders.
func TestUnevenBatchesJoinZeRO1(t *testing.T) {
	cfg := small()
	cfg.Ranks, cfg.UnevenBatches, cfg.GlobalBatch = 3, 2, 42
	want, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	cfg.Zero1 = true
	got, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, want.GlobalStep, got.GlobalStep)
	for i := range got.Params {
		for j, v := range got.Params[i].Data {
			require.InDelta(t, want.Params[i].Data[j], v, 1e-5, "param %d[%d]", i, j) // float32: the orders differ
		}
	}
}
