package ddp_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
)

// BenchmarkOptimizerExposed measures the exposed optimizer time
// (StepStats.OptimizerExposed: from the end of the last bucket's collective
// to the end of Step) of cmd/train's models on 4 in-process ranks, 32 rows
// per rank, with the separate Step and with the optimizer in backward, for
// PyTorch's bucket sizes and for 16 KiB buckets. It reports, as means over
// ranks and steps: exposed-µs/step; opt-after-comm-µs/step, the optimizer
// work in it (StepStats.Optimizer: Step's update, or the updates made
// after the last collective ended), which leaves out the scheduling
// between Run and Step; update-µs/step, the optimizer's work in all;
// exposed-median-µs and opt-after-comm-median-µs, the medians over ranks
// and steps (on a loaded machine the means are swayed by the few steps in
// which a rank is descheduled).
//
//	go test -run '^$' -bench OptimizerExposed ./ddp/
func BenchmarkOptimizerExposed(b *testing.B) {
	for _, model := range []string{"mlp", "cnn"} {
		for _, optName := range []string{"sgd", "adam"} {
			for _, bucket := range []int{25 << 20, 16 << 10} {
				for _, overlap := range []bool{false, true} {
					name := fmt.Sprintf("model=%s/opt=%s/bucket=%dKiB/overlap=%v", model, optName, bucket>>10, overlap)
					b.Run(name, func(b *testing.B) { benchExposed(b, model, optName, bucket, overlap) })
				}
			}
		}
	}
}

func benchExposed(b *testing.B, model, optName string, bucket int, overlap bool) {
	const ranks, perRank = 4, 32
	exposed := make([]time.Duration, ranks)
	samples := make([][]time.Duration, ranks)      // every step's exposed time
	afterSamples := make([][]time.Duration, ranks) // and its optimizer work after the collectives
	update := make([]time.Duration, ranks)
	after := make([]time.Duration, ranks)
	errs := allreducetest.RunInproc(ranks, time.Minute, func(g *allreduce.Group) error {
		opt := traintest.NewOpt[float32](b, optName)
		first := min(bucket, ddp.DefaultFirstBucketBytes)
		opts := []ddp.Option{ddp.WithBucketBytes(first, bucket), ddp.WithAgreement(func() bool { return false })}
		if overlap {
			opts = append(opts, ddp.WithOptimizerInBackward[float32](opt.(optim.Ranged[float32])))
		}
		vm, d, x, y, err := benchNet(model, perRank, g, opts)
		if err != nil {
			return err
		}
		ctx := context.Background()
		r := g.Rank()
		for s := 0; s < b.N+2; s++ {
			xs, ys := traintest.BatchData[float32](s%8, ranks*perRank)
			xr, yr := traintest.Rows(xs, ys, r, perRank)
			copy(x, xr)
			copy(y, yr)
			if err := d.Run(ctx, vm); err != nil {
				return err
			}
			if err := d.Step(ctx, opt); err != nil {
				return err
			}
			if s >= 2 { // the first steps size the state
				st := d.LastStats()
				exposed[r] += st.OptimizerExposed
				samples[r] = append(samples[r], st.OptimizerExposed)
				afterSamples[r] = append(afterSamples[r], st.Optimizer)
				update[r] += st.OptimizerTotal
				after[r] += st.Optimizer
			}
		}
		return nil
	})
	if err := allreducetest.FirstError(errs); err != nil {
		b.Fatal(err)
	}
	var e, u, a time.Duration
	var all, allAfter []time.Duration
	for r := range exposed {
		e += exposed[r]
		u += update[r]
		a += after[r]
		all = append(all, samples[r]...)
		allAfter = append(allAfter, afterSamples[r]...)
	}
	slices.Sort(all)
	slices.Sort(allAfter)
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "exposed-median-µs")
	b.ReportMetric(float64(allAfter[len(allAfter)/2].Nanoseconds())/1e3, "opt-after-comm-median-µs")
	n := float64(ranks * b.N)
	b.ReportMetric(float64(e.Microseconds())/n, "exposed-µs/step")
	b.ReportMetric(float64(a.Microseconds())/n, "opt-after-comm-µs/step")
	b.ReportMetric(float64(u.Microseconds())/n, "update-µs/step")
}

// benchNet builds cmd/train's mlp (784-256-128-10) or LeNet for perRank
// rows, wrapped over g, and returns its machine and input backings.
func benchNet(kind string, perRank int, g *allreduce.Group, opts []ddp.Option) (G.VM, *ddp.DDP[float32], []float32, []float32, error) {
	gr := G.NewGraph()
	var m models.Model
	var err error
	if kind == "mlp" {
		m, err = models.NewMLP(gr, tensor.Float32, 1, 784, 256, 128, 10)
	} else {
		m, err = models.NewLeNet(gr, tensor.Float32, 1)
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	d, err := ddp.Wrap[float32](context.Background(), g, m.Learnables(), opts...)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	x, y := make([]float32, perRank*784), make([]float32, perRank*10)
	var xn, yn *G.Node
	err = graphlock.Do(func() error {
		xn = G.NewMatrix(gr, tensor.Float32, G.WithShape(perRank, 784), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(perRank, 784), tensor.WithBacking(x))))
		yn = G.NewMatrix(gr, tensor.Float32, G.WithShape(perRank, 10), G.WithName("y"), G.WithValue(tensor.New(tensor.WithShape(perRank, 10), tensor.WithBacking(y))))
		return nil
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	logits, err := m.Forward(xn, d.Tapped())
	if err != nil {
		return nil, nil, nil, nil, err
	}
	loss, err := models.CrossEntropy(logits, yn)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := d.Backward(loss); err != nil {
		return nil, nil, nil, nil, err
	}
	var vm G.VM
	err = graphlock.Do(func() error { vm = G.NewTapeMachine(gr.SubgraphRoots(d.Outputs()...)); return nil })
	return vm, d, x, y, err
}
