package ddp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/internal/run/traintest"
)

// A machine compiled on the subgraph of Outputs trains bit for bit as one
// compiled on the whole graph, and leaves out the MLP's input gradient.
func TestOutputsSubgraphTrainsTheSame(t *testing.T) {
	for _, kind := range []string{"mlp", "cnn"} {
		full := trainWith(t, kind, false)
		pruned := trainWith(t, kind, true)
		for r := range full {
			for i := range full[r] {
				require.Equal(t, full[r][i], pruned[r][i], "%s rank %d parameter %d", kind, r, i)
			}
		}
	}
}

// trainWith trains 2 ranks for 3 steps and returns their parameters; with
// prune, the machine runs the subgraph of d.Outputs().
func trainWith(t *testing.T, kind string, prune bool) [][][]float64 {
	const ranks, perRank, steps = 2, 5, 3
	out := make([][][]float64, ranks)
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		n, d := traintest.BuildNet[float64](t, kind, perRank, g)
		if prune {
			var sub *G.ExprGraph
			require.NoError(t, graphlock.Do(func() error {
				sub = n.G.SubgraphRoots(d.Outputs()...)
				n.VM = G.NewTapeMachine(sub)
				return nil
			}))
			if kind == "mlp" { // LeNet's first convolution builds no input gradient
				require.Less(t, len(sub.AllNodes()), len(n.G.AllNodes()), "the subgraph leaves nothing out")
			}
			require.Equal(t, d.Outputs()[0], n.Loss)
		}
		opt := traintest.NewOpt[float64](t, "sgd")
		r := g.Rank()
		for s := 0; s < steps; s++ {
			x, y := traintest.BatchData[float64](s, ranks*perRank)
			traintest.SetInput(t, n, x[r*perRank*784:(r+1)*perRank*784], y[r*perRank*10:(r+1)*perRank*10])
			if err := d.Run(context.Background(), n.VM); err != nil {
				return err
			}
			if err := d.Step(context.Background(), opt); err != nil {
				return err
			}
		}
		out[r] = traintest.ParamValues[float64](n)
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return out
}
