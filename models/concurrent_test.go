package models

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"
)

// Ranks (parallel subtests) build their graphs concurrently (constructors, Forward and
// CrossEntropy take graphlock; G.Grad and the machine are built under it in
// buildRig) and then run their machines in parallel. Under -race this is the
// check that the locking covers gorgonia's shared state.
func TestConcurrentBuildAndRun(t *testing.T) {
	const ranks = 4
	losses := make([]float64, ranks)
	t.Run("ranks", func(t *testing.T) {
		for rank := 0; rank < ranks; rank++ {
			t.Run(fmt.Sprint(rank), func(t *testing.T) {
				t.Parallel()
				ctor := lenetCtor
				if rank%2 == 1 {
					ctor = mlpCtor()
				}
				r := buildRig(t, ctor, tensor.Float64, 5, 2, 784, 10, rank >= 2)
				x, y, _ := randInputs(tensor.Float64, 8, 2, 784, 10)
				r.bind(t, x, y)
				losses[rank] = r.run(t)
			})
		}
	})
	require.False(t, t.Failed())
	// same seed and data: LeNet ranks (0, 2) agree, MLP ranks (1, 3) agree,
	// with and without substitute parameters.
	assert.Equal(t, losses[0], losses[2])
	assert.Equal(t, losses[1], losses[3])
}
