package models

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// rig is a built model graph: input x, one-hot labels y, logits, loss and the
// gradient of the loss with respect to every learnable.
type rig struct {
	g      *G.ExprGraph
	model  Model
	x, y   *G.Node
	logits *G.Node
	loss   *G.Node
	learn  G.Nodes
	grads  G.Nodes
	vm     G.VM
}

type modelCtor func(g *G.ExprGraph, dt tensor.Dtype, seed int64) (Model, error)

func mlpCtor(sizes ...int) modelCtor {
	return func(g *G.ExprGraph, dt tensor.Dtype, seed int64) (Model, error) {
		return NewMLP(g, dt, seed, sizes...)
	}
}

func lenetCtor(g *G.ExprGraph, dt tensor.Dtype, seed int64) (Model, error) {
	return NewLeNet(g, dt, seed)
}

// substitute applies an identity op (×1) to every learnable, standing in for
// ddp's tap op.
func substitute(t testing.TB, learn G.Nodes) G.Nodes {
	t.Helper()
	out := make(G.Nodes, len(learn))
	require.NoError(t, graphlock.Do(func() error {
		for i, p := range learn {
			var one *G.Node
			if p.Dtype() == tensor.Float32 {
				one = G.NewConstant(float32(1))
			} else {
				one = G.NewConstant(float64(1))
			}
			var err error
			if out[i], err = G.Mul(p, one); err != nil {
				return err
			}
		}
		return nil
	}))
	return out
}

// buildRig builds model, loss and gradients in a fresh graph. With subst, the
// forward is built from identity-op substitutes of the learnables.
func buildRig(t testing.TB, ctor modelCtor, dt tensor.Dtype, seed int64, batch, in, classes int, subst bool) *rig {
	t.Helper()
	r := &rig{g: G.NewGraph()}
	var err error
	r.model, err = ctor(r.g, dt, seed)
	require.NoError(t, err)
	r.learn = r.model.Learnables()
	require.NoError(t, graphlock.Do(func() error {
		r.x = G.NewMatrix(r.g, dt, G.WithShape(batch, in), G.WithName("x"))
		r.y = G.NewMatrix(r.g, dt, G.WithShape(batch, classes), G.WithName("y"))
		return nil
	}))
	params := r.learn
	if subst {
		params = substitute(t, r.learn)
	}
	r.logits, err = r.model.Forward(r.x, params)
	require.NoError(t, err)
	r.loss, err = CrossEntropy(r.logits, r.y)
	require.NoError(t, err)
	require.NoError(t, graphlock.Do(func() error {
		var err error
		if r.grads, err = G.Grad(r.loss, r.learn...); err != nil {
			return err
		}
		r.vm = G.NewTapeMachine(r.g)
		return nil
	}))
	t.Cleanup(func() { r.vm.Close() })
	return r
}

// bind binds input and label values.
func (r *rig) bind(t testing.TB, x, y tensor.Tensor) {
	t.Helper()
	require.NoError(t, G.Let(r.x, x))
	require.NoError(t, G.Let(r.y, y))
}

// run runs forward and backward once and returns the loss.
func (r *rig) run(t testing.TB) float64 {
	t.Helper()
	r.vm.Reset()
	require.NoError(t, r.vm.RunAll())
	return scalarValue(t, r.loss.Value())
}

func scalarValue(t testing.TB, v G.Value) float64 {
	t.Helper()
	f, err := scalarOf(v)
	require.NoError(t, err)
	return f
}

// f64s returns the float64 data of a node's value (no copy).
func f64s(t testing.TB, n *G.Node) []float64 {
	t.Helper()
	d, ok := n.Value().Data().([]float64)
	require.True(t, ok, "%s: data %T", n.Name(), n.Value().Data())
	return d
}

// toF64 copies a float32 or float64 node value to []float64.
func toF64(t testing.TB, v G.Value) []float64 {
	t.Helper()
	switch d := v.Data().(type) {
	case []float64:
		return append([]float64(nil), d...)
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	}
	t.Fatalf("unexpected data %T", v.Data())
	return nil
}

// randInputs returns a batch of inputs in [0,1) and random one-hot labels.
func randInputs(dt tensor.Dtype, seed uint64, batch, in, classes int) (*tensor.Dense, *tensor.Dense, []uint8) {
	rng := rand.New(rand.NewPCG(seed, 7))
	labels := make([]uint8, batch)
	for i := range labels {
		labels[i] = uint8(rng.IntN(classes))
	}
	xs := make([]float64, batch*in)
	for i := range xs {
		xs[i] = rng.Float64()
	}
	var x *tensor.Dense
	if dt == tensor.Float32 {
		x32 := make([]float32, len(xs))
		for i, v := range xs {
			x32[i] = float32(v)
		}
		x = tensor.New(tensor.WithShape(batch, in), tensor.WithBacking(x32))
	} else {
		x = tensor.New(tensor.WithShape(batch, in), tensor.WithBacking(xs))
	}
	y := tensor.New(tensor.Of(dt), tensor.WithShape(batch, classes))
	if err := FillOneHot(y, labels); err != nil {
		panic(err)
	}
	return x, y, labels
}
