package ddp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/optim"
)

// branchNet is linearNet (loss Σ_i Σ_j p_i[j]·c_i[j]) with a second
// machine that skips parameter skip's branch: compiled on the subgraph of
// the other parameters' gradients only, it never computes skip's gradient.
type branchNet struct {
	*linearNet
	skipVM G.VM
}

func newBranchNet(t testing.TB, g *allreduce.Group, sizes []int, skip int, opts ...ddp.Option) (*branchNet, *ddp.DDP[float32]) {
	n, d := newLinearNet(t, g, sizes, 11, opts...)
	var roots G.Nodes
	for i, gr := range d.Outputs()[1:] {
		if i != skip {
			roots = append(roots, gr)
		}
	}
	b := &branchNet{linearNet: n}
	require.NoError(t, graphlock.Do(func() error {
		b.skipVM = G.NewTapeMachine(n.loss.Graph().SubgraphRoots(roots...))
		return nil
	}))
	return b, d
}

// TestUnusedParameterWithoutOptionNamesIt: a step that skips a branch fails
// on every rank within seconds (no hang), the skipping rank's error naming
// the parameter and the option, the peers' the abort.
func TestUnusedParameterWithoutOptionNamesIt(t *testing.T) {
	start := time.Now()
	errs := allreducetest.RunInproc(3, 20*time.Second, func(g *allreduce.Group) error {
		n, d := newBranchNet(t, g, []int{5, 3, 7}, 1)
		vm := n.vm
		if g.Rank() == 0 {
			vm = n.skipVM
		}
		return d.Run(context.Background(), vm)
	})
	require.Less(t, time.Since(start), 15*time.Second)
	require.Error(t, errs[0])
	t.Log("rank 0: ", errs[0])
	require.Contains(t, errs[0].Error(), "p1 (index 1)")
	require.Contains(t, errs[0].Error(), "WithFindUnusedParameters")
	for r := 1; r < 3; r++ {
		require.Error(t, errs[r], "rank %d must fail, not hang", r)
		t.Logf("rank %d: %v", r, errs[r])
	}
}

// TestFindUnusedParameters: with WithFindUnusedParameters, ranks that skip
// a branch on some steps (rank 0 on odd steps, every rank on step 3) train
// on; the parameters equal a plain-Go reference in which a skipped
// parameter's gradient is zero on that rank and the gradient is averaged
// over all ranks (plain SGD), for buckets of one parameter each and for
// one bucket, and LastUnused names the skipped parameter.
func TestFindUnusedParameters(t *testing.T) {
	const ranks, steps, lr = 3, 5, 0.5
	sizes := []int{5, 3, 7, 1}
	const skip = 2
	skips := func(rank, step int) bool { return step == 3 || rank == 0 && step%2 == 1 }
	for _, bucket := range []int{4, 1 << 20} {
		init := make([][]float32, ranks)
		coef := make([][][]float32, ranks)
		final := make([][]float32, ranks)
		errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
			n, d := newBranchNet(t, g, sizes, skip, ddp.WithFindUnusedParameters(), ddp.WithBucketBytes(bucket, bucket))
			r := g.Rank()
			init[r] = append([]float32(nil), d.ParamArena()...)
			coef[r] = n.coef
			opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: lr})
			if err != nil {
				return err
			}
			ctx := context.Background()
			for s := 0; s < steps; s++ {
				vm := n.vm
				if skips(r, s) {
					vm = n.skipVM
				}
				if err := d.Run(ctx, vm); err != nil {
					return err
				}
				if got := d.LastUnused(); skips(r, s) {
					require.Equal(t, []int{skip}, got)
				} else {
					require.Empty(t, got)
				}
				if err := d.Step(ctx, opt); err != nil {
					return err
				}
			}
			final[r] = append([]float32(nil), d.ParamArena()...)
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
		// The reference, in parameter order (the arena holds them in reverse).
		want := make([][]float64, len(sizes))
		off := len(init[0])
		for i, n := range sizes {
			off -= n
			want[i] = make([]float64, n)
			for j := range want[i] {
				want[i][j] = float64(init[0][off+j])
			}
		}
		for s := 0; s < steps; s++ {
			for i := range sizes {
				for j := range want[i] {
					sum := 0.0
					for r := 0; r < ranks; r++ {
						if !(i == skip && skips(r, s)) {
							sum += float64(coef[r][i][j])
						}
					}
					want[i][j] -= lr * sum / ranks
				}
			}
		}
		requireArenasClose(t, final, sizes, want)
	}
}
