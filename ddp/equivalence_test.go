package ddp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/graphlock"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
)

const modelSeed = 7

// net is one model graph with its inputs, loss and machine.
type net struct {
	g      *G.ExprGraph
	model  models.Model
	x, y   *G.Node
	loss   *G.Node
	grads  G.Nodes // plain (non-ddp) gradient nodes, reference only
	vm     G.VM
	params G.Nodes
}

func newModel(t testing.TB, g *G.ExprGraph, kind string, dt tensor.Dtype) (models.Model, int) {
	switch kind {
	case "mlp":
		m, err := models.NewMLP(g, dt, modelSeed, 784, 24, 10)
		require.NoError(t, err)
		return m, 784
	case "cnn":
		m, err := models.NewLeNet(g, dt, modelSeed)
		require.NoError(t, err)
		return m, 784
	}
	t.Fatalf("unknown model %q", kind)
	return nil, 0
}

// buildNet builds a model of batch rows; with wrap it is wrapped by ddp.
func buildNet[T ddp.Float](t testing.TB, kind string, batch int, group *allreduce.Group, opts ...ddp.Option) (*net, *ddp.DDP[T]) {
	dt := tensor.Float64
	var z T
	if _, ok := any(z).(float32); ok {
		dt = tensor.Float32
	}
	n := &net{g: G.NewGraph()}
	var features int
	n.model, features = newModel(t, n.g, kind, dt)
	n.params = n.model.Learnables()
	var d *ddp.DDP[T]
	use := n.params
	if group != nil {
		var err error
		d, err = ddp.Wrap[T](context.Background(), group, n.params, opts...)
		require.NoError(t, err)
		use = d.Tapped()
	}
	require.NoError(t, graphlock.Do(func() error {
		n.x = G.NewMatrix(n.g, dt, G.WithShape(batch, features), G.WithName("x"), G.WithInit(G.Zeroes()))
		n.y = G.NewMatrix(n.g, dt, G.WithShape(batch, 10), G.WithName("y"), G.WithInit(G.Zeroes()))
		return nil
	}))
	logits, err := n.model.Forward(n.x, use)
	require.NoError(t, err)
	n.loss, err = models.CrossEntropy(logits, n.y)
	require.NoError(t, err)
	if d != nil {
		require.NoError(t, d.Backward(n.loss))
	} else {
		require.NoError(t, graphlock.Do(func() error {
			n.grads, err = G.Grad(n.loss, n.params...)
			return err
		}))
	}
	require.NoError(t, graphlock.Do(func() error {
		n.vm = G.NewTapeMachine(n.g)
		return nil
	}))
	return n, d
}

// batchData is a deterministic global batch: rows of features and one-hot labels.
func batchData[T ddp.Float](step, rows int) ([]T, []T) {
	rng := rand.New(rand.NewPCG(uint64(step), 99))
	x := make([]T, rows*784)
	for i := range x {
		x[i] = T(rng.Float64())
	}
	y := make([]T, rows*10)
	for r := 0; r < rows; r++ {
		y[r*10+rng.IntN(10)] = 1
	}
	return x, y
}

func setInput[T ddp.Float](t testing.TB, n *net, x, y []T) {
	xs := n.x.Shape()
	ys := n.y.Shape()
	require.NoError(t, G.Let(n.x, tensor.New(tensor.WithShape(xs...), tensor.WithBacking(append([]T(nil), x...)))))
	require.NoError(t, G.Let(n.y, tensor.New(tensor.WithShape(ys...), tensor.WithBacking(append([]T(nil), y...)))))
}

func newOpt[T ddp.Float](t testing.TB, name string) optim.Optimizer[T] {
	switch name {
	case "sgd":
		o, err := optim.NewSGD[T](optim.SGDConfig{LR: 0.05, Momentum: 0.9})
		require.NoError(t, err)
		return o
	case "adam":
		o, err := optim.NewAdam[T](optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		require.NoError(t, err)
		return o
	}
	t.Fatalf("unknown optimizer %q", name)
	return nil
}

// referenceRun trains one process on the global batch for steps steps and
// returns each parameter's values.
func referenceRun[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int) [][]T {
	rows := ranks * perRank
	n, _ := buildNet[T](t, kind, rows, nil)
	opt := newOpt[T](t, optName)
	var flatP, flatG []T
	for s := 0; s < steps; s++ {
		x, y := batchData[T](s, rows)
		setInput(t, n, x, y)
		n.vm.Reset()
		require.NoError(t, n.vm.RunAll())
		flatP, flatG = flatP[:0], flatG[:0]
		for i, p := range n.params {
			flatP = append(flatP, p.Value().Data().([]T)...)
			flatG = append(flatG, n.grads[i].Value().Data().([]T)...)
		}
		require.NoError(t, opt.Step(flatP, flatG))
		off := 0
		for _, p := range n.params {
			data := p.Value().Data().([]T)
			off += copy(data, flatP[off:off+len(data)])
		}
	}
	out := make([][]T, len(n.params))
	for i, p := range n.params {
		out[i] = append([]T(nil), p.Value().Data().([]T)...)
	}
	return out
}

// ddpRun trains ranks replicas, each on its perRank rows of the same global
// batches, and returns every rank's parameters after each step's check.
func ddpRun[T ddp.Float](t testing.TB, kind, optName string, ranks, perRank, steps int) [][][]T {
	out := make([][][]T, ranks)
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		n, d := buildNet[T](t, kind, perRank, g)
		opt := newOpt[T](t, optName)
		ctx := context.Background()
		r := g.Rank()
		for s := 0; s < steps; s++ {
			x, y := batchData[T](s, ranks*perRank)
			setInput(t, n, x[r*perRank*784:(r+1)*perRank*784], y[r*perRank*10:(r+1)*perRank*10])
			if err := d.Run(ctx, n.vm); err != nil {
				return err
			}
			if err := d.Step(ctx, opt); err != nil {
				return err
			}
			if err := d.CheckReplicas(ctx); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
		}
		params := make([][]T, len(n.params))
		for i, p := range n.params {
			params[i] = append([]T(nil), p.Value().Data().([]T)...)
		}
		out[r] = params
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return out
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
