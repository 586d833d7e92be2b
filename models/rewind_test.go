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
// after step with new inputs, for the graphs tapevm.Safe accepts; LeNet's
// is refused, naming an op.
func TestRewindMatchesReset(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, sizes := range [][]int{nil, {784, 33, 10}, {784, 10}} {
			reset := buildRig(t, mlpCtor(sizes...), dt, 7, 19, 784, 10, false)
			rewound := buildRig(t, mlpCtor(sizes...), dt, 7, 19, 784, 10, false)
			ok, op := tapevm.Safe(rewound.g)
			require.True(t, ok, "MLP %v: op %s not rewindable", sizes, op)
			for step := range 4 {
				x, y, _ := randInputs(dt, uint64(step+1), 19, 784, 10)
				reset.bind(t, x, y)
				rewound.bind(t, x.Clone().(*tensor.Dense), y.Clone().(*tensor.Dense))
				want := reset.run(t)
				require.True(t, tapevm.Rewind(rewound.vm), "not rewound")
				require.NoError(t, rewound.vm.RunAll())
				got := scalarValue(t, rewound.loss.Value())
				require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%v %v step %d: loss", dt, sizes, step)
				for i := range reset.grads {
					w, g := toF64(t, reset.grads[i].Value()), toF64(t, rewound.grads[i].Value())
					require.Equal(t, len(w), len(g))
					for j := range w {
						if math.Float64bits(w[j]) != math.Float64bits(g[j]) {
							t.Fatalf("%v %v step %d: gradient %d element %d: %v rewound, %v reset", dt, sizes, step, i, j, g[j], w[j])
						}
					}
				}
			}
		}
	}
	lenet := buildRig(t, lenetCtor, tensor.Float32, 1, 4, 784, 10, false)
	ok, op := tapevm.Safe(lenet.g)
	require.False(t, ok)
	require.NotEmpty(t, op)
}
