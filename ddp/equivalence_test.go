package ddp_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
)

// referenceRun trains one process on the global batch for steps steps and
// returns each parameter's values.
func referenceRun[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int) [][]T {
	params, _ := referenceRunLosses[T](t, kind, optName, ranks, perRank, steps)
	return params
}

// referenceRunLosses is referenceRun that also returns each step's loss.
func referenceRunLosses[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int) ([][]T, []float64) {
	var losses []float64
	rows := ranks * perRank
	n, _ := traintest.BuildNet[T](t, kind, rows, nil)
	opt := traintest.NewOpt[T](t, optName)
	var flatP, flatG []T
	for s := 0; s < steps; s++ {
		x, y := traintest.BatchData[T](s, rows)
		traintest.SetInput(t, n, x, y)
		n.VM.Reset()
		require.NoError(t, n.VM.RunAll())
		losses = append(losses, float64(n.Loss.Value().Data().(T)))
		flatP, flatG = flatP[:0], flatG[:0]
		for i, p := range n.Params {
			flatP = append(flatP, p.Value().Data().([]T)...)
			flatG = append(flatG, n.Grads[i].Value().Data().([]T)...)
		}
		require.NoError(t, opt.Step(flatP, flatG))
		off := 0
		for _, p := range n.Params {
			data := p.Value().Data().([]T)
			off += copy(data, flatP[off:off+len(data)])
		}
	}
	out := make([][]T, len(n.Params))
	for i, p := range n.Params {
		out[i] = append([]T(nil), p.Value().Data().([]T)...)
	}
	return out, losses
}

// ddpRun trains ranks replicas, each on its perRank rows of the same global
// batches, and returns every rank's parameters after each step's check.
func ddpRun[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int) [][][]T {
	out, _ := ddpRunAgreed[T](t, kind, optName, ranks, perRank, steps, nil)
	return out
}

// ddpRunAgreed is ddpRun with the group options gopts and, when agreed is
// true, WithAgreement; it also returns every rank's agreed loss per step.
func ddpRunAgreed[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int, gopts []allreduce.GroupOption, dopts ...ddp.Option) ([][][]T, [][]float64) {
	out := make([][][]T, ranks)
	losses := make([][]float64, ranks)
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		n, d := traintest.BuildNet[T](t, kind, perRank, g, dopts...)
		opt := traintest.NewOpt[T](t, optName)
		ctx := context.Background()
		r := g.Rank()
		for s := 0; s < steps; s++ {
			x, y := traintest.BatchData[T](s, ranks*perRank)
			traintest.SetInput(t, n, x[r*perRank*784:(r+1)*perRank*784], y[r*perRank*10:(r+1)*perRank*10])
			if err := d.Run(ctx, n.VM); err != nil {
				return err
			}
			losses[r] = append(losses[r], d.Agreed().Loss)
			if err := d.Step(ctx, opt); err != nil {
				return err
			}
			if err := d.CheckReplicas(ctx); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
		}
		params := make([][]T, len(n.Params))
		for i, p := range n.Params {
			params[i] = append([]T(nil), p.Value().Data().([]T)...)
		}
		out[r] = params
		return nil
	}, gopts...)
	require.NoError(t, allreducetest.FirstError(errs))
	return out, losses
}

// maxRelDiff is the largest, over parameter tensors, of the tensor's
// max-norm relative difference max|a-b| / max|a|.
func maxRelDiff[T ddp.Float](a, b [][]T) float64 {
	worst := 0.0
	for i := range a {
		scale, diff := 0.0, 0.0
		for j := range a[i] {
			x, y := float64(a[i][j]), float64(b[i][j])
			scale = math.Max(scale, math.Abs(x))
			diff = math.Max(diff, math.Abs(x-y))
		}
		if scale > 0 {
			worst = math.Max(worst, diff/scale)
		}
	}
	return worst
}

func TestEquivalenceWithSingleProcess(t *testing.T) {
	steps := 20
	for _, kind := range []string{"mlp", "cnn"} {
		for _, optName := range []string{"sgd", "adam"} {
			for _, ranks := range []int{1, 2, 3, 4} {
				if testing.Short() && kind == "cnn" && ranks > 2 {
					continue
				}
				perRank := 2
				t.Run(fmt.Sprintf("%s/%s/ranks=%d/float64", kind, optName, ranks), func(t *testing.T) {
					want := referenceRun[float64](t, kind, optName, ranks, perRank, steps)
					got := ddpRun[float64](t, kind, optName, ranks, perRank, steps)
					for r := range got {
						require.LessOrEqual(t, maxRelDiff(want, got[r]), 1e-10, "rank %d", r)
					}
				})
				// float32 with Adam on the CNN sits at float32's floor: the
				// two runs sum each gradient in a different order (per rank,
				// then across ranks), and Adam's m/sqrt(v) turns last-bit
				// differences of near-zero gradient elements into whole
				// lr-sized steps. Measured: 1.3e-5..1.6e-4 after 20 steps at
				// N = 3, 4, while float64 agrees to 1e-10 and SGD float32 to
				// 1e-5, so a wrong reduction (an O(1) difference) still fails.
				tol32 := 1e-5
				if kind == "cnn" && optName == "adam" {
					tol32 = 1e-3
				}
				t.Run(fmt.Sprintf("%s/%s/ranks=%d/float32", kind, optName, ranks), func(t *testing.T) {
					want := referenceRun[float32](t, kind, optName, ranks, perRank, steps)
					got := ddpRun[float32](t, kind, optName, ranks, perRank, steps)
					for r := range got {
						require.LessOrEqual(t, maxRelDiff(want, got[r]), tol32, "rank %d", r)
					}
				})
			}
		}
	}
}

// TestEquivalenceWithAgreement: with the loss and stop vote riding on the
// last bucket, DDP still matches one process over the global batch, on the
// in-process and the between-processes (ring) algorithms, and the agreed
// loss is the global batch's loss (the mean of equal-sized batches' means).
func TestEquivalenceWithAgreement(t *testing.T) {
	const steps, perRank = 10, 2
	for _, ranks := range []int{1, 2, 3, 4} {
		for _, alg := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring} {
			t.Run(fmt.Sprintf("ranks=%d/%v", ranks, alg), func(t *testing.T) {
				want, wantLoss := referenceRunLosses[float64](t, "mlp", "adam", ranks, perRank, steps)
				got, losses := ddpRunAgreed[float64](t, "mlp", "adam", ranks, perRank, steps,
					[]allreduce.GroupOption{allreduce.WithAlgorithm(alg)}, ddp.WithAgreement(func() bool { return false }))
				for r := range got {
					require.LessOrEqual(t, maxRelDiff(want, got[r]), 1e-10, "rank %d", r)
					require.Len(t, losses[r], steps)
					for s, l := range losses[r] {
						require.InDelta(t, wantLoss[s], l, 1e-12, "rank %d step %d", r, s)
						require.Equal(t, losses[0][s], l, "every rank agrees bitwise")
					}
				}
			})
		}
	}
}
