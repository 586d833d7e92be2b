package models

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/internal/tapevm"
)

// A tape machine rewound (tapevm.Rewind: registers kept) computes the same
// loss and gradients, bit for bit, as one Reset before every run, step
// after step with new inputs, for the graphs tapevm.Safe accepts: the MLPs
// and LeNet (made of its Conv2D and MaxPool2x2 ops, not gorgonia's).
func TestRewindMatchesReset(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, sizes := range [][]int{nil, {784, 33, 10}, {784, 10}} {
			rewindMatchesReset(t, "MLP", mlpCtor(sizes...), dt, 19, 784, 10)
		}
		rewindMatchesReset(t, "LeNet", lenetCtor, dt, 5, 784, 10)
	}
}

// rewindMatchesReset runs two rigs of one model four steps, one Reset and
// one rewound, and requires bitwise equal losses and gradients.
func rewindMatchesReset(t *testing.T, name string, ctor modelCtor, dt tensor.Dtype, batch, in, classes int) {
	t.Helper()
	reset := buildRig(t, ctor, dt, 7, batch, in, classes, false)
	rewound := buildRig(t, ctor, dt, 7, batch, in, classes, false)
	ok, op := tapevm.Safe(rewound.g)
	require.True(t, ok, "%s: op %s not rewindable", name, op)
	for step := range 4 {
		x, y, _ := randInputs(dt, uint64(step+1), batch, in, classes)
		reset.bind(t, x, y)
		rewound.bind(t, x.Clone().(*tensor.Dense), y.Clone().(*tensor.Dense))
		want := reset.run(t)
		require.True(t, tapevm.Rewind(rewound.vm), "not rewound")
		require.NoError(t, rewound.vm.RunAll())
		got := scalarValue(t, rewound.loss.Value())
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%s %v step %d: loss", name, dt, step)
		for i := range reset.grads {
			w, g := toF64(t, reset.grads[i].Value()), toF64(t, rewound.grads[i].Value())
			require.Equal(t, len(w), len(g))
			for j := range w {
				if math.Float64bits(w[j]) != math.Float64bits(g[j]) {
					t.Fatalf("%s %v step %d: gradient %d element %d: %v rewound, %v reset", name, dt, step, i, j, g[j], w[j])
				}
			}
		}
	}
}
