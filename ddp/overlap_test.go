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
	"github.com/ringddp/ringddp/optim"
)

// overlapOpts are the optimizer configurations the overlap is checked with:
// momentum and weight decay on, so that the state matters.
var overlapOpts = map[string]func() (optim.Optimizer[float32], error){
	"sgd": func() (optim.Optimizer[float32], error) {
		return optim.NewSGD[float32](optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, Nesterov: true})
	},
	"adam": func() (optim.Optimizer[float32], error) {
		return optim.NewAdam[float32](optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2})
	},
	"adamw": func() (optim.Optimizer[float32], error) {
		return optim.NewAdamW[float32](optim.DefaultAdamWConfig())
	},
}

// trained is one rank's result: its parameters and optimizer state.
type trained struct {
	params []float32
	state  optim.State
}

// ranksRunner runs fn on ranks ranks, each with its group.
type ranksRunner func(ranks int, fn func(g *allreduce.Group) error) []error

// inprocRanks runs ranks in process, with the group options opts.
func inprocRanks(opts ...allreduce.GroupOption) ranksRunner {
	return func(ranks int, fn func(g *allreduce.Group) error) []error {
		return allreducetest.RunInproc(ranks, 30*time.Second, fn, opts...)
	}
}

// trainOverlap trains kind on ranks ranks for steps steps with buckets of
// bucketBytes (the first too), the optimizer applied by Step or, with
// inBackward, bucket by bucket inside Run.
func trainOverlap(t *testing.T, kind, optName string, ranks, steps, bucketBytes int, inBackward bool) []trained {
	return trainOverlapOn(t, inprocRanks(), kind, optName, ranks, steps, bucketBytes, inBackward)
}

// trainOverlapOn is trainOverlap on the ranks run gives, with the DDP
// options extra besides.
func trainOverlapOn(t *testing.T, run ranksRunner, kind, optName string, ranks, steps, bucketBytes int, inBackward bool, extra ...ddp.Option) []trained {
	const perRank = 3
	out := make([]trained, ranks)
	errs := run(ranks, func(g *allreduce.Group) error {
		opt, err := overlapOpts[optName]()
		if err != nil {
			return err
		}
		opts := []ddp.Option{ddp.WithBucketBytes(bucketBytes, bucketBytes), ddp.WithAgreement(func() bool { return false })}
		opts = append(opts, extra...)
		if inBackward {
			opts = append(opts, ddp.WithOptimizerInBackward[float32](opt.(optim.Ranged[float32])))
		}
		n, d := traintest.BuildNet[float32](t, kind, perRank, g, opts...)
		ctx := context.Background()
		r := g.Rank()
		for s := 0; s < steps; s++ {
			x, y := traintest.BatchData[float32](s, ranks*perRank)
			xr, yr := traintest.Rows(x, y, r, perRank)
			traintest.SetInput(t, n, xr, yr)
			// A schedule: the step's constants change. With the optimizer in
			// backward the rate must be set before Run, which applies it.
			if err := opt.SetLR(opt.LR() * 0.9); err != nil {
				return err
			}
			if err := d.Run(ctx, n.VM); err != nil {
				return err
			}
			if err := d.Step(ctx, opt); err != nil {
				return err
			}
			st := d.LastStats()
			if st.OptimizerExposed < 0 || st.Optimizer < 0 || st.OptimizerTotal <= 0 {
				return fmt.Errorf("step %d: optimizer figures %+v", s, st)
			}
		}
		out[r] = trained{params: append([]float32(nil), d.ParamArena()...), state: opt.State()}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return out
}

func requireSameBits(t *testing.T, what string, want, got []float32) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: element %d is %v, the separate step gives %v", what, i, got[i], want[i])
		}
	}
}

func requireSameState(t *testing.T, want, got optim.State) {
	t.Helper()
	require.Equal(t, want.Step, got.Step)
	require.Equal(t, want.Len, got.Len)
	require.Len(t, got.Buffers, len(want.Buffers))
	for k := range want.Buffers {
		for i, w := range want.Buffers[k].Data {
			if math.Float64bits(w) != math.Float64bits(got.Buffers[k].Data[i]) {
				t.Fatalf("state %s[%d] = %v, the separate step gives %v", want.Buffers[k].Name, i, got.Buffers[k].Data[i], w)
			}
		}
	}
}

// TestOptimizerInBackwardBitwise: updating each bucket as its all-reduce
// completes gives bitwise the parameters and optimizer state of the
// separate Step, for SGD (Nesterov momentum, weight decay), Adam (L2) and
// AdamW, on 1 to 4 ranks, with many small buckets (parameters of odd
// sizes: the 7-wide MLP) and with one bucket.
func TestOptimizerInBackwardBitwise(t *testing.T) {
	ranks := []int{1, 2, 3, 4}
	if testing.Short() {
		ranks = []int{1, 3}
	}
	for _, optName := range []string{"sgd", "adam", "adamw"} {
		for _, n := range ranks {
			for _, bucket := range []int{64, 1 << 20} {
				t.Run(fmt.Sprintf("%s/ranks=%d/bucket=%d", optName, n, bucket), func(t *testing.T) {
					want := trainOverlap(t, "mlp-odd", optName, n, 3, bucket, false)
					got := trainOverlap(t, "mlp-odd", optName, n, 3, bucket, true)
					for r := range got {
						requireSameBits(t, fmt.Sprintf("rank %d parameters", r), want[r].params, got[r].params)
						requireSameState(t, want[r].state, got[r].state)
					}
				})
			}
		}
	}
}

// TestOptimizerInBackwardMisuse: a Step with another optimizer, or a Step
// whose Run did not synchronise, is an error naming the cause; an
// optimizer of the wrong element type is refused by Wrap.
func TestOptimizerInBackwardMisuse(t *testing.T) {
	errs := allreducetest.RunInproc(1, 10*time.Second, func(g *allreduce.Group) error {
		opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.1})
		require.NoError(t, err)
		other, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.1})
		require.NoError(t, err)
		n, d := traintest.BuildNet[float32](t, "mlp-odd", 2, g, ddp.WithOptimizerInBackward[float32](opt))
		x, y := traintest.BatchData[float32](0, 2)
		traintest.SetInput(t, n, x, y)
		ctx := context.Background()
		require.NoError(t, d.NoSync(func() error { return d.Run(ctx, n.VM) }))
		require.ErrorContains(t, d.Step(ctx, opt), "without a synchronised Run")
		require.NoError(t, d.Run(ctx, n.VM))
		require.ErrorContains(t, d.Step(ctx, other), "WithOptimizerInBackward")
		require.NoError(t, d.Step(ctx, nil))
		require.Equal(t, int64(1), opt.Steps())
		require.Equal(t, int64(1), d.Steps())

		wrong, err := optim.NewSGD[float64](optim.SGDConfig{LR: 0.1})
		require.NoError(t, err)
		_, err = ddp.Wrap[float32](ctx, g, n.Params, ddp.WithOptimizerInBackward[float64](wrong))
		require.ErrorContains(t, err, "element type")
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}
