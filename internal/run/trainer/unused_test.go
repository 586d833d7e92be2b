package trainer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/models"
)

// skipModel is Config.NewModel for a models.SkipMLP of hidden width 16
// whose block drop leaves out; computeDropped computes its zero gradient
// instead (no parameter unused).
func skipModel(drop func(step int64, rank int) bool, computeDropped bool) func(*G.ExprGraph, tensor.Dtype, int64, int, int) (models.Model, error) {
	return func(g *G.ExprGraph, dt tensor.Dtype, seed int64, features, classes int) (models.Model, error) {
		return models.NewSkipMLP(g, dt, seed, models.SkipMLPConfig{Sizes: []int{features, 16, classes}, Drop: drop, ComputeDropped: computeDropped})
	}
}

// dropSome drops the block on every rank at steps 1, 4, 7, … and on rank
// 0 alone at steps 2, 6, 10, …: the ranks differ in what they use.
func dropSome(step int64, rank int) bool { return step%3 == 1 || rank == 0 && step%4 == 2 }

// With FindUnusedParameters, a model whose steps leave its block out on
// some steps (some ranks, or all) trains to the end with bitwise the
// parameters of the reference: the same model whose dropped steps compute
// the block's gradient, which is exactly zero through the zero gate, so
// no parameter is unused and find-unused is off. Bitwise, not within a
// rounding: the left-out gradient is filled with +0 where the reference
// computes ±0, every other gradient is the same computation, and adding
// a zero (of either sign) to a sum, a momentum or a parameter leaves its
// value unchanged. With each of -compress bf16 and powersgd,
// -overlap-optimizer, -zero1 and -uneven-batches too: find-unused works
// with all of them. (About 0.2 s per case; skipped under -race, where
// ddp's TestFindUnusedParameters covers the mechanism.)
func TestFindUnusedParametersTrains(t *testing.T) {
	if underRace {
		t.Skip("whole training runs: too slow under the race detector")
	}
	cases := map[string]func(*Config){
		"plain":             func(*Config) {},
		"compress-bf16":     func(c *Config) { c.Compress = "bf16" },
		"compress-powersgd": func(c *Config) { c.Compress = "powersgd:1:2" },
		"overlap-optimizer": func(c *Config) { c.OverlapOptimizer = true },
		"zero1":             func(c *Config) { c.Zero1 = true },
		"uneven-batches":    func(c *Config) { c.UnevenBatches = 2 },
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := small()
			cfg.Epochs, cfg.MaxSteps = 1, 12
			set(&cfg)
			ref := cfg
			ref.NewModel = skipModel(dropSome, true)
			want, err := Run(ctxT(t), ref)
			require.NoError(t, err)

			cfg.NewModel = skipModel(dropSome, false)
			cfg.FindUnusedParameters = true
			got, err := Run(ctxT(t), cfg)
			require.NoError(t, err)
			require.Equal(t, want.Stop, got.Stop)
			equalParams(t, want.Params, got.Params)
		})
	}
}

// Without FindUnusedParameters, the first step that leaves the block out
// fails the run within seconds (no hang: every rank's goroutine returns),
// naming the block's parameters and find-unused-parameters: on every rank
// at once, and on one rank alone (whose peers are aborted).
func TestUnusedParametersWithoutTheOptionFail(t *testing.T) {
	for name, drop := range map[string]func(int64, int) bool{
		"every-rank": func(step int64, _ int) bool { return step == 1 },
		"one-rank":   func(step int64, rank int) bool { return step == 1 && rank == 1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := small()
			cfg.Epochs = 1
			cfg.NewModel = skipModel(drop, false)
			start := time.Now()
			_, err := Run(ctxT(t), cfg)
			require.Error(t, err)
			t.Log(err)
			require.Less(t, time.Since(start), 10*time.Second)
			for _, want := range []string{"epoch 1 step 2", "mlp.w1 (index 2)", "mlp.b1 (index 3)", "find-unused-parameters", "find_unused_parameters=True"} {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

// A model's Skips error stops the run naming it.
func TestSkipsErrorStopsTheRun(t *testing.T) {
	cfg := small()
	cfg.Epochs = 1
	cfg.NewModel = func(g *G.ExprGraph, dt tensor.Dtype, seed int64, features, classes int) (models.Model, error) {
		m, err := models.NewMLP(g, dt, seed, features, 8, classes)
		return badSkipper{m}, err
	}
	_, err := Run(ctxT(t), cfg)
	require.ErrorContains(t, err, "step 2 leaves out parameter 7 of 4")
}

type badSkipper struct{ *models.MLP }

func (badSkipper) Skips(step int64, _ int) ([]int, error) {
	if step == 2 {
		return []int{7}, nil
	}
	return nil, nil
}
