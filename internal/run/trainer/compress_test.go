package trainer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every -compress choice trains the small synthetic problem to the
// accuracy the plain all-reduce reaches there (TestTrainsOnSynthetic's
// 0.9), PowerSGD compressing from step 5 of 50.
func TestTrainsCompressed(t *testing.T) {
	for _, c := range []string{"fp16", "bf16", "powersgd:2:5", "auto"} {
		t.Run(c, func(t *testing.T) {
			cfg := small()
			cfg.Compress = c
			res, err := Run(ctxT(t), cfg)
			require.NoError(t, err)
			require.Equal(t, StopDone, res.Stop)
			require.Greater(t, res.Epochs[len(res.Epochs)-1].TestAccuracy, 0.9)
		})
	}
}

// A bad -compress, or one with ZeRO-1, is refused before training.
func TestCompressConfigErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"zip":        "unknown compression",
		"powersgd:0": "PowerSGD rank",
	} {
		cfg := small()
		cfg.Compress = spec
		_, err := Run(context.Background(), cfg)
		require.ErrorContains(t, err, want)
	}
	cfg := small()
	cfg.Compress, cfg.Zero1 = "bf16", true
	_, err := Run(context.Background(), cfg)
	require.ErrorContains(t, err, "ZeRO-1 reduce-scatters its buckets")
}

// Uneven batches with a compression hook: the short rank shadows the
// others' steps through the hook (ddp.Join), and the run finishes at the
// even run's global step with a trained model. (1 s; skipped under -race.)
func TestUnevenBatchesCompressed(t *testing.T) {
	if underRace {
		t.Skip("whole training runs: too slow under the race detector")
	}
	for _, c := range []string{"bf16", "powersgd:2:0"} {
		cfg := small()
		cfg.Ranks, cfg.Epochs, cfg.Compress, cfg.UnevenBatches = 4, 1, c, 2
		res, err := Run(ctxT(t), cfg)
		require.NoError(t, err, c)
		require.Equal(t, int64(res.Epochs[0].Steps), res.GlobalStep, c)
		require.Greater(t, res.Epochs[0].TestAccuracy, 0.8, c)
	}
}
