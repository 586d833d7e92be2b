// Package traintest builds small gorgonia models with and without ddp for
// the tests of ddp, zero and the trainer: deterministic batches, optimizers
// and a single-process reference.
package traintest

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
)

const ModelSeed = 7

// Net is one model graph with its inputs, loss and machine.
type Net struct {
	G      *G.ExprGraph
	Model  models.Model
	X, Y   *G.Node
	Loss   *G.Node
	Grads  G.Nodes // plain (non-ddp) gradient nodes, reference only
	VM     G.VM
	Params G.Nodes
}

func newModel(t testing.TB, g *G.ExprGraph, kind string, dt tensor.Dtype) (models.Model, int) {
	switch kind {
	case "mlp":
		m, err := models.NewMLP(g, dt, ModelSeed, 784, 24, 10)
		require.NoError(t, err)
		return m, 784
	case "mlp-odd":
		m, err := models.NewMLP(g, dt, ModelSeed, 784, 7, 10)
		require.NoError(t, err)
		return m, 784
	case "cnn":
		m, err := models.NewLeNet(g, dt, ModelSeed)
		require.NoError(t, err)
		return m, 784
	}
	t.Fatalf("unknown model %q", kind)
	return nil, 0
}

// Wrapper is what a data-parallel wrapper (ddp.DDP, zero.ZeRO1) gives the
// model builder.
type Wrapper interface {
	Tapped() G.Nodes
	Backward(loss *G.Node) error
}

// Build builds a model of kind ("mlp", "mlp-odd", "cnn") for batch rows of
// element type T. wrap, if not nil, wraps the parameters; otherwise the
// plain gradients are in Net.Grads.
func Build[T ddp.Float](t testing.TB, kind string, batch int, wrap func(params G.Nodes) Wrapper) *Net {
	dt := tensor.Float64
	var z T
	if _, ok := any(z).(float32); ok {
		dt = tensor.Float32
	}
	n := &Net{G: G.NewGraph()}
	var features int
	n.Model, features = newModel(t, n.G, kind, dt)
	n.Params = n.Model.Learnables()
	var w Wrapper
	use := n.Params
	if wrap != nil {
		w = wrap(n.Params)
		use = w.Tapped()
	}
	require.NoError(t, graphlock.Do(func() error {
		n.X = G.NewMatrix(n.G, dt, G.WithShape(batch, features), G.WithName("x"), G.WithInit(G.Zeroes()))
		n.Y = G.NewMatrix(n.G, dt, G.WithShape(batch, 10), G.WithName("y"), G.WithInit(G.Zeroes()))
		return nil
	}))
	logits, err := n.Model.Forward(n.X, use)
	require.NoError(t, err)
	n.Loss, err = models.CrossEntropy(logits, n.Y)
	require.NoError(t, err)
	if w != nil {
		require.NoError(t, w.Backward(n.Loss))
	} else {
		require.NoError(t, graphlock.Do(func() error {
			n.Grads, err = G.Grad(n.Loss, n.Params...)
			return err
		}))
	}
	require.NoError(t, graphlock.Do(func() error {
		n.VM = G.NewTapeMachine(n.G)
		return nil
	}))
	return n
}

// BuildNet builds a model of batch rows, wrapped by ddp over group when
// group is not nil.
func BuildNet[T ddp.Float](t testing.TB, kind string, batch int, group *allreduce.Group, opts ...ddp.Option) (*Net, *ddp.DDP[T]) {
	if group == nil {
		return Build[T](t, kind, batch, nil), nil
	}
	var d *ddp.DDP[T]
	n := Build[T](t, kind, batch, func(params G.Nodes) Wrapper {
		var err error
		d, err = ddp.Wrap[T](context.Background(), group, params, opts...)
		require.NoError(t, err)
		return d
	})
	return n, d
}

// Rows returns rank's rows of a global batch of perRank·ranks rows.
func Rows[T ddp.Float](x, y []T, rank, perRank int) ([]T, []T) {
	return x[rank*perRank*784 : (rank+1)*perRank*784], y[rank*perRank*10 : (rank+1)*perRank*10]
}

// ParamValues copies every parameter's values, in creation order.
func ParamValues[T ddp.Float](n *Net) [][]T {
	out := make([][]T, len(n.Params))
	for i, p := range n.Params {
		out[i] = append([]T(nil), p.Value().Data().([]T)...)
	}
	return out
}

// BatchData is a deterministic global batch: rows of features and one-hot labels.
func BatchData[T ddp.Float](step, rows int) ([]T, []T) {
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

// SetInput binds x and y to the net's inputs.
func SetInput[T ddp.Float](t testing.TB, n *Net, x, y []T) {
	xs := n.X.Shape()
	ys := n.Y.Shape()
	require.NoError(t, G.Let(n.X, tensor.New(tensor.WithShape(xs...), tensor.WithBacking(append([]T(nil), x...)))))
	require.NoError(t, G.Let(n.Y, tensor.New(tensor.WithShape(ys...), tensor.WithBacking(append([]T(nil), y...)))))
}

func NewOpt[T ddp.Float](t testing.TB, name string) optim.Optimizer[T] {
	switch name {
	case "sgd":
		o, err := optim.NewSGD[T](optim.SGDConfig{LR: 0.05, Momentum: 0.9})
		require.NoError(t, err)
		return o
	case "adam":
		o, err := optim.NewAdam[T](optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		require.NoError(t, err)
		return o
	case "adamw":
		o, err := optim.NewAdamW[T](optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
		require.NoError(t, err)
		return o
	}
	t.Fatalf("unknown optimizer %q", name)
	return nil
}
