package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// SkipMLP is an MLP with one residual block that some training steps leave
// out (stochastic depth, Huang et al. 2016; LayerDrop): a model whose steps
// do not use every parameter, the case of PyTorch DDP's
// find_unused_parameters. For sizes (in, hidden, classes):
//
//	h = ReLU(x·W_0 + b_0)
//	h = h + gate·ReLU(h·W_1 + b_1)   the block; gate 1, or 0 on a step that drops it
//	logits = h·W_2 + b_2
//
// Its learnables are W_0, b_0, W_1, b_1, W_2, b_2 (Block gives the
// block's indices). gorgonia's graphs are static, so a dropped step is the
// same graph with the gate at 0 run by a machine compiled without the
// block's gradients: the block's parameters get no gradient (they are
// unused in that step; its true gradient is zero), and the forward pass,
// unchanged by a zero gate, still computes the block. Skips sets the gate
// for a step and names what it leaves out; a forward pass no Skips
// prepared (evaluation) keeps the block, unscaled (stochastic depth's
// survival-probability scaling at test time is not applied).
type SkipMLP struct {
	mlp   *MLP // W_0, b_0 | W_1, b_1 | W_2, b_2: three layers of widths in, hidden, hidden, classes
	cfg   SkipMLPConfig
	gates G.Nodes // each Forward's gate: a scalar input
}

var _ Model = (*SkipMLP)(nil)

// SkipMLPConfig configures NewSkipMLP.
type SkipMLPConfig struct {
	// Sizes are the input width, the hidden (and block) width and the
	// classes.
	Sizes []int
	// Drop reports whether the step at global step (from 0) on rank
	// drops the block (nil: never).
	Drop func(step int64, rank int) bool
	// ComputeDropped keeps the block's parameters in a dropped step: its
	// gradient is computed (zero, through the zero gate) and Skips names
	// nothing. The same training, without unused parameters.
	ComputeDropped bool
}

// NewSkipMLP creates a SkipMLP in g, initialised as NewMLP initialises
// its layers (in→hidden, hidden→hidden, hidden→classes) from seed.
func NewSkipMLP(g *G.ExprGraph, dt tensor.Dtype, seed int64, cfg SkipMLPConfig) (*SkipMLP, error) {
	if len(cfg.Sizes) != 3 {
		return nil, fmt.Errorf("models: NewSkipMLP: want 3 sizes (input, hidden, classes), got %v", cfg.Sizes)
	}
	in, hidden, classes := cfg.Sizes[0], cfg.Sizes[1], cfg.Sizes[2]
	mlp, err := NewMLP(g, dt, seed, in, hidden, hidden, classes)
	if err != nil {
		return nil, err
	}
	cfg.Sizes = append([]int(nil), cfg.Sizes...)
	return &SkipMLP{mlp: mlp, cfg: cfg}, nil
}

// Learnables returns W_0, b_0, W_1, b_1, W_2, b_2 (a fresh slice).
func (m *SkipMLP) Learnables() G.Nodes { return m.mlp.Learnables() }

// Block returns the indices, in Learnables, of the block's parameters.
func (m *SkipMLP) Block() []int { return []int{2, 3} }

// Skips readies the forward passes for the step at global step on rank
// (the gate 0 if it drops the block, else 1) and returns the indices of
// the parameters that step leaves out: the block's when it drops it
// (unless ComputeDropped), else none.
func (m *SkipMLP) Skips(step int64, rank int) ([]int, error) {
	drop := m.cfg.Drop != nil && m.cfg.Drop(step, rank)
	v := 1.0
	if drop {
		v = 0
	}
	for _, gt := range m.gates {
		if err := G.Let(gt, gateValue(gt.Dtype(), v)); err != nil {
			return nil, fmt.Errorf("models: SkipMLP gate: %w", err)
		}
	}
	if !drop || m.cfg.ComputeDropped {
		return nil, nil
	}
	return m.Block(), nil
}

// Forward builds the logits (batch × classes) for x (batch × input
// width) from params (see Model.Forward), with the block's gate at 1
// until Skips sets it.
func (m *SkipMLP) Forward(x *G.Node, params G.Nodes) (*G.Node, error) {
	if err := checkParams("SkipMLP", x, params, m.mlp.learnables); err != nil {
		return nil, err
	}
	if s := x.Shape(); s.Dims() != 2 || s[1] != m.cfg.Sizes[0] {
		return nil, fmt.Errorf("models: SkipMLP.Forward: input shape %v, want (batch, %d)", s, m.cfg.Sizes[0])
	}
	var out *G.Node
	err := graphlock.Do(func() error {
		dt := m.mlp.Dtype()
		gt := G.NewScalar(x.Graph(), dt, G.WithName(uniqueName(x.Graph(), "skipmlp.gate")), G.WithValue(gateValue(dt, 1)))
		h, err := dense(x, params[0], params[1])
		if err == nil {
			h, err = relu(h)
		}
		var z *G.Node
		if err == nil {
			z, err = dense(h, params[2], params[3])
		}
		if err == nil {
			z, err = relu(z)
		}
		if err == nil {
			z, err = G.Mul(gt, z)
		}
		if err == nil {
			h, err = G.Add(h, z)
		}
		if err == nil {
			out, err = dense(h, params[4], params[5])
		}
		if err != nil {
			return fmt.Errorf("models: SkipMLP.Forward: %w", err)
		}
		m.gates = append(m.gates, gt)
		return nil
	})
	return out, err
}

// scalarOf is v as a scalar value of dtype dt (float32 or float64).
func gateValue(dt tensor.Dtype, v float64) G.Value {
	if dt == tensor.Float32 {
		return G.NewF32(float32(v))
	}
	return G.NewF64(v)
}
