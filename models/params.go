package models

import (
	"fmt"
	"math"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// checkDtype reports whether dt is one of the float dtypes the models support.
func checkDtype(dt tensor.Dtype) error {
	switch dt {
	case tensor.Float32, tensor.Float64:
		return nil
	default:
		return fmt.Errorf("models: unsupported dtype %v (want float32 or float64)", dt)
	}
}

// newRNG returns the deterministic generator used for parameter
// initialisation: the same seed always gives the same stream.
func newRNG(seed int64) *rand.Rand {
	s := uint64(seed)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// uniformBacking draws n values from U(-bound, bound) as dt's element type.
// Values are drawn in float64 and converted, so float32 and float64 models
// with the same seed start from the same (rounded) parameters.
func uniformBacking(rng *rand.Rand, dt tensor.Dtype, n int, bound float64) interface{} {
	switch dt {
	case tensor.Float32:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32((2*rng.Float64() - 1) * bound)
		}
		return out
	default:
		out := make([]float64, n)
		for i := range out {
			out[i] = (2*rng.Float64() - 1) * bound
		}
		return out
	}
}

// kaimingBound is PyTorch's default bound for nn.Linear and nn.Conv2d weights
// and biases (kaiming_uniform_ with a=√5): 1/√fanIn.
func kaimingBound(fanIn int) float64 { return 1 / math.Sqrt(float64(fanIn)) }

// uniqueName returns base, or base with a numeric suffix when a node of that
// name already exists in g. gorgonia hash-conses nodes: two input nodes with
// the same name, type and shape in one graph collapse into a single node, so
// parameter names must be unique per graph (two models in one graph).
func uniqueName(g *G.ExprGraph, base string) string {
	name := base
	for i := 1; len(g.ByName(name)) > 0; i++ {
		name = fmt.Sprintf("%s#%d", base, i)
	}
	return name
}

// newParam creates a trainable input node of the given shape in g, initialised
// from U(-bound, bound). It must be called under graphlock.
func newParam(g *G.ExprGraph, dt tensor.Dtype, base string, shape tensor.Shape, rng *rand.Rand, bound float64) (*G.Node, error) {
	backing := uniformBacking(rng, dt, shape.TotalSize(), bound)
	val := tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(backing))
	name := uniqueName(g, base)
	n := G.NewTensor(g, dt, shape.Dims(), G.WithShape(shape.Clone()...), G.WithName(name), G.WithValue(val))
	if n.Value() != val {
		return nil, fmt.Errorf("models: parameter %q collided with an existing node", name)
	}
	return n, nil
}

// checkParams validates the params passed to Forward against the model's
// learnables and x's graph.
func checkParams(model string, x *G.Node, params, learnables G.Nodes) error {
	if x == nil {
		return fmt.Errorf("models: %s.Forward: nil input", model)
	}
	if len(params) != len(learnables) {
		return fmt.Errorf("models: %s.Forward: got %d params, want %d", model, len(params), len(learnables))
	}
	for i, p := range params {
		l := learnables[i]
		if p == nil {
			return fmt.Errorf("models: %s.Forward: param %d (%s) is nil", model, i, l.Name())
		}
		if !p.Shape().Eq(l.Shape()) {
			return fmt.Errorf("models: %s.Forward: param %d (%s) has shape %v, want %v", model, i, l.Name(), p.Shape(), l.Shape())
		}
		if p.Dtype() != l.Dtype() {
			return fmt.Errorf("models: %s.Forward: param %d (%s) has dtype %v, want %v", model, i, l.Name(), p.Dtype(), l.Dtype())
		}
		if p.Graph() != x.Graph() {
			return fmt.Errorf("models: %s.Forward: param %d (%s) is not in x's graph", model, i, l.Name())
		}
	}
	if x.Dtype() != learnables[0].Dtype() {
		return fmt.Errorf("models: %s.Forward: input dtype %v, want %v", model, x.Dtype(), learnables[0].Dtype())
	}
	return nil
}

// dense adds the bias b (1×out) to the product h×w (batch×out), broadcasting
// b over the batch.
func dense(h, w, b *G.Node) (*G.Node, error) {
	xw, err := G.Mul(h, w)
	if err != nil {
		return nil, err
	}
	return G.BroadcastAdd(xw, b, nil, []byte{0})
}
