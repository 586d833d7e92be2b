package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// LeNet geometry: 28×28 single-channel input, two 5×5 valid convolutions each
// followed by ReLU and a 2×2 max-pool (28→24→12→8→4), then two fully
// connected layers.
const (
	lenetSide    = 28
	lenetInput   = lenetSide * lenetSide // 784
	lenetKernel  = 5
	lenetC1      = 8
	lenetC2      = 16
	lenetFlat    = lenetC2 * 4 * 4 // 256
	lenetHidden  = 64
	lenetClasses = 10
)

// LeNet is a small CNN for 28×28 images:
//
//	x (batch, 784) → reshape (batch, 1, 28, 28)
//	→ conv 1→8 5×5 + bias → ReLU → max-pool 2×2   (batch, 8, 12, 12)
//	→ conv 8→16 5×5 + bias → ReLU → max-pool 2×2  (batch, 16, 4, 4)
//	→ flatten (batch, 256) → fc 256→64 → ReLU → fc 64→10 (logits)
//
// Its learnables, in order: conv1.w (8,1,5,5), conv1.b (1,8,1,1),
// conv2.w (16,8,5,5), conv2.b (1,16,1,1), fc1.w (256,64), fc1.b (1,64),
// fc2.w (64,10), fc2.b (1,10).
type LeNet struct {
	dt         tensor.Dtype
	learnables G.Nodes
}

var _ Model = (*LeNet)(nil)

// NewLeNet creates a LeNet in g with dtype float32 or float64. Every weight
// and bias is drawn from U(-1/√fanIn, 1/√fanIn) (fanIn = in·kh·kw for the
// convolutions), as PyTorch's nn.Conv2d and nn.Linear do, from a generator
// seeded with seed.
func NewLeNet(g *G.ExprGraph, dt tensor.Dtype, seed int64) (*LeNet, error) {
	if g == nil {
		return nil, fmt.Errorf("models: NewLeNet: nil graph")
	}
	if err := checkDtype(dt); err != nil {
		return nil, err
	}
	type spec struct {
		name  string
		shape tensor.Shape
		fanIn int
	}
	k := lenetKernel
	specs := []spec{
		{"lenet.conv1.w", tensor.Shape{lenetC1, 1, k, k}, 1 * k * k},
		{"lenet.conv1.b", tensor.Shape{1, lenetC1, 1, 1}, 1 * k * k},
		{"lenet.conv2.w", tensor.Shape{lenetC2, lenetC1, k, k}, lenetC1 * k * k},
		{"lenet.conv2.b", tensor.Shape{1, lenetC2, 1, 1}, lenetC1 * k * k},
		{"lenet.fc1.w", tensor.Shape{lenetFlat, lenetHidden}, lenetFlat},
		{"lenet.fc1.b", tensor.Shape{1, lenetHidden}, lenetFlat},
		{"lenet.fc2.w", tensor.Shape{lenetHidden, lenetClasses}, lenetHidden},
		{"lenet.fc2.b", tensor.Shape{1, lenetClasses}, lenetHidden},
	}
	m := &LeNet{dt: dt}
	rng := newRNG(seed)
	err := graphlock.Do(func() error {
		for _, s := range specs {
			p, err := newParam(g, dt, s.name, s.shape, rng, kaimingBound(s.fanIn))
			if err != nil {
				return err
			}
			m.learnables = append(m.learnables, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Learnables returns the parameter nodes in the order documented on LeNet
// (a fresh slice).
func (m *LeNet) Learnables() G.Nodes { return append(G.Nodes(nil), m.learnables...) }

// Dtype returns the parameters' dtype.
func (m *LeNet) Dtype() tensor.Dtype { return m.dt }

// Forward builds the logits (batch × 10) for x (batch × 784) from params
// (see Model.Forward).
func (m *LeNet) Forward(x *G.Node, params G.Nodes) (*G.Node, error) {
	if err := checkParams("LeNet", x, params, m.learnables); err != nil {
		return nil, err
	}
	s := x.Shape()
	if s.Dims() != 2 || s[1] != lenetInput {
		return nil, fmt.Errorf("models: LeNet.Forward: input shape %v, want (batch, %d)", s, lenetInput)
	}
	batch := s[0]
	var out *G.Node
	err := graphlock.Do(func() error {
		wrap := func(stage string, err error) error {
			return fmt.Errorf("models: LeNet.Forward: %s: %w", stage, err)
		}
		img, err := G.Reshape(x, tensor.Shape{batch, 1, lenetSide, lenetSide})
		if err != nil {
			return wrap("reshape input", err)
		}
		h := img
		for i, c := range []struct{ w, b *G.Node }{{params[0], params[1]}, {params[2], params[3]}} {
			// The first layer's input is the data: no gradient for it.
			conv, err := conv2d(h, c.w, c.b, i > 0)
			if err != nil {
				return wrap(fmt.Sprintf("conv%d", i+1), err)
			}
			if conv, err = relu(conv); err != nil {
				return wrap(fmt.Sprintf("conv%d relu", i+1), err)
			}
			if h, err = maxPool2x2(conv); err != nil {
				return wrap(fmt.Sprintf("pool%d", i+1), err)
			}
		}
		flat, err := G.Reshape(h, tensor.Shape{batch, lenetFlat})
		if err != nil {
			return wrap("flatten", err)
		}
		fc1, err := dense(flat, params[4], params[5])
		if err != nil {
			return wrap("fc1", err)
		}
		if fc1, err = relu(fc1); err != nil {
			return wrap("fc1 relu", err)
		}
		if out, err = dense(fc1, params[6], params[7]); err != nil {
			return wrap("fc2", err)
		}
		return nil
	})
	return out, err
}
