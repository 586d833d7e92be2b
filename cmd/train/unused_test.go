package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/internal/run/trainer"
	"github.com/ringddp/ringddp/models"
)

// -find-unused-parameters reaches the trainer (and through it ddp): the
// configuration the command builds from its flags, given a model whose
// block is dropped at every other step (the built-in models use every
// parameter), trains to the end with the flag and fails without it within
// seconds, naming the flag.
func TestFindUnusedParametersFlag(t *testing.T) {
	data := writeMNISTDir(t)
	for _, on := range []bool{true, false} {
		args := []string{"-data", data, "-ranks", "2", "-epochs", "1", "-batch", "40", "-max-steps", "6", "-out", "", "-quiet"}
		if on {
			args = append(args, "-find-unused-parameters")
		}
		o, err := parseFlags(args, io.Discard)
		require.NoError(t, err)
		require.Equal(t, on, o.cfg.FindUnusedParameters)
		o.cfg.NewModel = func(g *G.ExprGraph, dt tensor.Dtype, seed int64, features, classes int) (models.Model, error) {
			return models.NewSkipMLP(g, dt, seed, models.SkipMLPConfig{
				Sizes: []int{features, 16, classes},
				Drop:  func(step int64, _ int) bool { return step%2 == 1 },
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		res, err := trainer.Run(ctx, o.cfg)
		cancel()
		if on {
			require.NoError(t, err)
			require.Equal(t, trainer.StopMaxSteps, res.Stop)
			continue
		}
		require.ErrorContains(t, err, "mlp.w1 (index 2)")
		require.ErrorContains(t, err, "cmd/train -find-unused-parameters")
		require.Less(t, time.Since(start), 10*time.Second)
	}
}
