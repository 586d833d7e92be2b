package trainer

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
)

// TestZeRO1ResumeAcrossModes: a ZeRO-1 checkpoint (optimizer state gathered
// from the shards) resumes under plain DDP and under ZeRO-1 on another world
// size, and a DDP checkpoint resumes under ZeRO-1; each ends where the
// uninterrupted run ends. With 2 ranks every reduction is a + b in both
// modes, so DDP and ZeRO-1 agree bitwise.
func TestZeRO1ResumeAcrossModes(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Optim, cfg.DType, cfg.LR, cfg.Momentum = OptimAdam, Float64, 1e-3, 0
	want, err := Run(ctxT(t), cfg)
	require.NoError(t, err)

	zeroCfg := cfg
	zeroCfg.Zero1 = true
	zeroWant, err := Run(ctxT(t), zeroCfg)
	require.NoError(t, err)
	equalParams(t, want.Params, zeroWant.Params)

	for _, c := range []struct {
		name                string
		firstZero, nextZero bool
		nextRanks           int
	}{
		{"zero1→ddp", true, false, 2},
		{"ddp→zero1", false, true, 2},
		{"zero1→zero1/ranks=4", true, true, 4},
		{"zero1→ddp/ranks=1", true, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			first := cfg
			first.Zero1 = c.firstZero
			first.MaxSteps = 13
			first.Checkpoint = filepath.Join(dir, strings.NewReplacer("/", "_", "=", "").Replace(c.name)+"-a.safetensors")
			_, err := Run(ctxT(t), first)
			require.NoError(t, err)
			next := cfg
			next.Zero1 = c.nextZero
			next.Ranks = c.nextRanks
			next.Resume = first.Checkpoint
			got, err := Run(ctxT(t), next)
			require.NoError(t, err)
			if c.nextRanks == 2 {
				equalParams(t, want.Params, got.Params)
			} else {
				// Another world size sums the same global batch in another
				// order: equal up to rounding.
				require.Less(t, maxParamDiff(want.Params, got.Params), 1e-9)
			}
		})
	}
}

// TestZeRO1ShardsOptimizerState: ZeRO-1 holds 1/N of DDP's optimizer state
// per rank and reports the same bytes on the wire.
func TestZeRO1ShardsOptimizerState(t *testing.T) {
	for _, ranks := range []int{2, 4} {
		cfg := small()
		cfg.Ranks, cfg.Epochs, cfg.Optim, cfg.LR, cfg.Momentum = ranks, 1, OptimAdam, 1e-3, 0
		ddpRun, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		cfg.Zero1 = true
		zeroRun, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		d, z := ddpRun.Epochs[0], zeroRun.Epochs[0]
		total := 0
		for _, p := range ddpRun.Params {
			total += len(p.Data)
		}
		lo, hi := allreduce.ChunkBounds(total, ranks, 0)
		require.Equal(t, int64(total*2*4), d.OptStateBytesPerRank, "Adam: two float32 buffers per parameter")
		require.Equal(t, int64((hi-lo)*2*4), z.OptStateBytesPerRank, "rank 0's shard")
		require.Equal(t, d.CommBytesPerStep, z.CommBytesPerStep)
	}
}
