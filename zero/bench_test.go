package zero_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// BenchmarkStep times one training step (forward, backward with the bucket
// collectives, optimizer, and for ZeRO-1 the all-gather) of the issue's
// model: MLP 784-2048-2048-10 (5.8 M float32 parameters, 22 MiB of
// gradients), 2 MiB buckets, Adam, 64 rows per rank, 4 in-process ranks.
// ns/op is one step of rank 0; the ranks run in step, so it is the world's
// step time. Mode zero1-buddy is ZeRO-1 with buddy copies (WrapWithBuddy).
func BenchmarkStep(b *testing.B) {
	const ranks, perRank = 4, 64
	for _, mode := range []string{"ddp", "zero1", "zero1-buddy"} {
		b.Run(fmt.Sprintf("mode=%s/ranks=%d", mode, ranks), func(b *testing.B) {
			benchSteps(b, mode, ranks, perRank, b.N)
		})
	}
}

func benchSteps(b *testing.B, mode string, ranks, perRank, steps int) {
	conns, _, err := allreducetest.InprocConns(ranks, time.Minute)
	require.NoError(b, err)
	times := make([]time.Duration, steps)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		step, done, err := benchRank(ctx, g, mode, perRank)
		if err != nil {
			return err
		}
		defer done()
		for i := 0; i < 2; i++ { // warm-up: sizes the optimizer state
			if err := step(); err != nil {
				return err
			}
		}
		if err := allreduce.Barrier(ctx, g); err != nil {
			return err
		}
		if g.Rank() == 0 {
			b.ResetTimer()
		}
		for i := 0; i < steps; i++ {
			start := time.Now()
			if err := step(); err != nil {
				return err
			}
			if g.Rank() == 0 {
				times[i] = time.Since(start)
			}
		}
		return allreduce.Barrier(ctx, g)
	})
	b.StopTimer()
	require.NoError(b, allreducetest.FirstError(errs))
	b.ReportMetric(float64(median(times).Microseconds())/1e3, "median-ms/step")
}

// benchNet is a benchmark's MLP (layer widths, 784 in and 10 out) and
// optimizer.
type benchNet struct {
	dims   []int
	newOpt func() (optim.Optimizer[float32], error)
}

// stepNet is BenchmarkStep's: MLP 784-2048-2048-10, Adam.
var stepNet = benchNet{dims: []int{784, 2048, 2048, 10}, newOpt: func() (optim.Optimizer[float32], error) {
	return optim.NewAdam[float32](optim.DefaultAdamConfig())
}}

// benchRank builds rank g's part of stepNet for mode (ddp, zero1,
// zero1-buddy) and returns its training step, and what releases it.
func benchRank(ctx context.Context, g *allreduce.Group, mode string, perRank int) (step func() error, done func(), err error) {
	return benchNetRank(ctx, g, stepNet, mode, perRank)
}

// benchNetRank is benchRank for net.
func benchNetRank(ctx context.Context, g *allreduce.Group, net benchNet, mode string, perRank int) (step func() error, done func(), err error) {
	opt, err := net.newOpt()
	if err != nil {
		return nil, nil, err
	}
	graph := G.NewGraph()
	model, err := models.NewMLP(graph, tensor.Float32, 1, net.dims...)
	if err != nil {
		return nil, nil, err
	}
	buckets := ddp.WithBucketBytes(1<<20, 2<<20)
	var z *zero.ZeRO1[float32]
	var d *ddp.DDP[float32]
	switch mode {
	case "zero1":
		z, err = zero.Wrap[float32](ctx, g, model.Learnables(), opt, buckets)
	case "zero1-buddy":
		shadow, serr := net.newOpt()
		if serr != nil {
			return nil, nil, serr
		}
		z, err = zero.WrapWithBuddy[float32](ctx, g, model.Learnables(), opt, shadow, buckets)
	}
	if err != nil {
		return nil, nil, err
	}
	if z != nil {
		d = z.DDP()
	} else if d, err = ddp.Wrap[float32](ctx, g, model.Learnables(), buckets); err != nil {
		return nil, nil, err
	}
	x := make([]float32, perRank*784)
	y := make([]float32, perRank*10)
	for i := range x {
		x[i] = float32((i*7+g.Rank()*13)%255) / 255
	}
	for r := 0; r < perRank; r++ {
		y[r*10+(r+g.Rank())%10] = 1
	}
	var xn, yn *G.Node
	_ = graphlock.Do(func() error {
		xn = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, 784), G.WithName("x"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, 784), tensor.WithBacking(x))))
		yn = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, 10), G.WithName("y"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, 10), tensor.WithBacking(y))))
		return nil
	})
	logits, err := model.Forward(xn, d.Tapped())
	if err != nil {
		return nil, nil, err
	}
	loss, err := models.CrossEntropy(logits, yn)
	if err != nil {
		return nil, nil, err
	}
	if err := d.Backward(loss); err != nil {
		return nil, nil, err
	}
	var vm G.VM
	_ = graphlock.Do(func() error { vm = G.NewTapeMachine(graph); return nil })
	step = func() error {
		if err := d.Run(ctx, vm); err != nil {
			return err
		}
		if z != nil {
			return z.Step(ctx)
		}
		return d.Step(ctx, opt)
	}
	return step, func() { vm.Close() }, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
