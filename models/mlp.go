package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// defaultMLPSizes are the layer widths NewMLP uses when none are given:
// 784 inputs (28×28 images), hidden layers of 256 and 128, 10 classes.
func defaultMLPSizes() []int { return []int{784, 256, 128, 10} }

// MLP is a fully connected network: for each layer i a weight W_i (in×out)
// and a bias b_i (1×out), with ReLU between layers and none after the last.
// Its learnables are W_0, b_0, W_1, b_1, … in that order.
type MLP struct {
	dt         tensor.Dtype
	sizes      []int
	learnables G.Nodes
}

var _ Model = (*MLP)(nil)

// NewMLP creates an MLP in g with the given layer widths (input, hidden…,
// classes; 784-256-128-10 when none are given) and dtype float32 or
// float64. Weights and biases are drawn from U(-1/√in, 1/√in), as PyTorch's
// nn.Linear does, from a generator seeded with seed: the same seed gives the
// same parameters.
func NewMLP(g *G.ExprGraph, dt tensor.Dtype, seed int64, sizes ...int) (*MLP, error) {
	if g == nil {
		return nil, fmt.Errorf("models: NewMLP: nil graph")
	}
	if err := checkDtype(dt); err != nil {
		return nil, err
	}
	if len(sizes) == 0 {
		sizes = defaultMLPSizes()
	}
	if len(sizes) < 2 {
		return nil, fmt.Errorf("models: NewMLP: need at least 2 sizes (input and output), got %v", sizes)
	}
	for _, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("models: NewMLP: sizes must be positive, got %v", sizes)
		}
	}
	m := &MLP{dt: dt, sizes: append([]int(nil), sizes...)}
	rng := newRNG(seed)
	err := graphlock.Do(func() error {
		for i := 0; i+1 < len(sizes); i++ {
			in, out := sizes[i], sizes[i+1]
			bound := kaimingBound(in)
			w, err := newParam(g, dt, fmt.Sprintf("mlp.w%d", i), tensor.Shape{in, out}, rng, bound)
			if err != nil {
				return err
			}
			b, err := newParam(g, dt, fmt.Sprintf("mlp.b%d", i), tensor.Shape{1, out}, rng, bound)
			if err != nil {
				return err
			}
			m.learnables = append(m.learnables, w, b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Learnables returns W_0, b_0, W_1, b_1, … (a fresh slice).
func (m *MLP) Learnables() G.Nodes { return append(G.Nodes(nil), m.learnables...) }

// Sizes returns the layer widths (a fresh slice).
func (m *MLP) Sizes() []int { return append([]int(nil), m.sizes...) }

// Dtype returns the parameters' dtype.
func (m *MLP) Dtype() tensor.Dtype { return m.dt }

// Forward builds the logits (batch × classes) for x (batch × input width)
// from params (see Model.Forward).
func (m *MLP) Forward(x *G.Node, params G.Nodes) (*G.Node, error) {
	if err := checkParams("MLP", x, params, m.learnables); err != nil {
		return nil, err
	}
	if s := x.Shape(); s.Dims() != 2 || s[1] != m.sizes[0] {
		return nil, fmt.Errorf("models: MLP.Forward: input shape %v, want (batch, %d)", s, m.sizes[0])
	}
	var out *G.Node
	err := graphlock.Do(func() error {
		h := x
		layers := len(m.sizes) - 1
		for i := 0; i < layers; i++ {
			z, err := dense(h, params[2*i], params[2*i+1])
			if err != nil {
				return fmt.Errorf("models: MLP.Forward: layer %d: %w", i, err)
			}
			if i+1 < layers {
				if z, err = relu(z); err != nil {
					return fmt.Errorf("models: MLP.Forward: layer %d relu: %w", i, err)
				}
			}
			h = z
		}
		out = h
		return nil
	})
	return out, err
}
