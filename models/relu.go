package models

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ReLU is the rectifier x ⊙ (x ≥ 0), computed exactly as gorgonia's
// Rectify computes it (the same product by 1 or 0, so the same bits: −0
// stays −0, a negative x gives −0, NaN stays NaN) but in one branch-free
// pass instead of a comparison, a product and two fresh tensors, and with
// a gradient dy ⊙ (x ≥ 0) in one pass too. Each node keeps its output
// buffer from run to run. ReLU takes graphlock; the models call relu
// inside their own graphlock.Do.
func ReLU(x *G.Node) (*G.Node, error) { return locked(func() (*G.Node, error) { return relu(x) }) }

// relu is ReLU for a caller that holds graphlock.
func relu(x *G.Node) (*G.Node, error) {
	if x == nil {
		return nil, fmt.Errorf("models: ReLU: nil node")
	}
	if err := checkDtype(x.Dtype()); err != nil {
		return nil, err
	}
	out, err := G.ApplyOp(&reluOp{}, x)
	if err != nil {
		return nil, fmt.Errorf("models: ReLU: %w", err)
	}
	return out, nil
}

// reluOp: x → x ⊙ (x ≥ 0). Its buffer is the node's value every run.
type reluOp struct{ buf outBuffer }

// reluGradOp: (x, dy) → dy ⊙ (x ≥ 0).
type reluGradOp struct{ buf outBuffer }

var (
	_ G.Op   = (*reluOp)(nil)
	_ G.SDOp = (*reluOp)(nil)
	_ G.Op   = (*reluGradOp)(nil)
)

func (*reluOp) Arity() int     { return 1 }
func (*reluGradOp) Arity() int { return 2 }

// Type: a → a, and a → a → a.
func (*reluOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (*reluGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}

func (*reluOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) { return sameShape("ReLU", 1, in) }
func (*reluGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return sameShape("ReLUGrad", 2, in)
}

func (op *reluOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, fmt.Errorf("ReLU: want 1 input, got %d", len(vals))
	}
	return elementwise("ReLU", &op.buf, vals[0], nil)
}

func (op *reluGradOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 2 {
		return nil, fmt.Errorf("ReLUGrad: want 2 inputs, got %d", len(vals))
	}
	return elementwise("ReLUGrad", &op.buf, vals[0], vals[1])
}

func (*reluOp) ReturnsPtr() bool         { return false }
func (*reluOp) CallsExtern() bool        { return false }
func (*reluOp) OverwritesInput() int     { return -1 }
func (*reluOp) WriteHash(h hash.Hash)    { _, _ = h.Write([]byte("ringddp.ReLU")) }
func (op *reluOp) Hashcode() uint32      { return opHash(op) }
func (*reluOp) String() string           { return "ReLU" }
func (*reluGradOp) ReturnsPtr() bool     { return false }
func (*reluGradOp) CallsExtern() bool    { return false }
func (*reluGradOp) OverwritesInput() int { return -1 }
func (*reluGradOp) WriteHash(h hash.Hash) {
	_, _ = h.Write([]byte("ringddp.ReLUGrad"))
}
func (op *reluGradOp) Hashcode() uint32 { return opHash(op) }
func (*reluGradOp) String() string      { return "ReLUGrad" }

func (*reluOp) DiffWRT(inputs int) []bool { return []bool{true} }

// SymDiff: d/dx = dy ⊙ (x ≥ 0), as gorgonia differentiates x ⊙ (x ≥ 0)
// (the comparison has no derivative).
func (*reluOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("ReLU.SymDiff: want 1 input, got %d", len(inputs))
	}
	dx, err := G.ApplyOp(&reluGradOp{}, inputs[0], grad)
	if err != nil {
		return nil, fmt.Errorf("ReLU.SymDiff: %w", err)
	}
	return G.Nodes{dx}, nil
}

// sameShape checks that op's n inputs are shapes, all equal, and returns it.
func sameShape(op string, n int, in []G.DimSizer) (tensor.Shape, error) {
	if len(in) != n {
		return nil, fmt.Errorf("%s: want %d inputs, got %d", op, n, len(in))
	}
	first, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("%s: input 0 is not a shape", op)
	}
	for i, d := range in[1:] {
		if s, ok := d.(tensor.Shape); !ok || !s.Eq(first) {
			return nil, fmt.Errorf("%s: input %d shape %v, input 0 %v", op, i+1, d, first)
		}
	}
	return first.Clone(), nil
}
