package models

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/internal/vecops"
)

// MaxPool2x2 is a 2×2 max-pool with stride 2 and no padding, as one op, for
// NCHW x (batch, channels, h, w) of a float dtype: y (batch, channels,
// ⌊h/2⌋, ⌊w/2⌋), each y[n, c, i, j] the maximum of the window x[n, c,
// 2i..2i+1, 2j..2j+1] (an odd last row or column belongs to no window, as
// in gorgonia's MaxPool2D). The forward run records each window's argmax
// (an index into x) and the gradient sends dY[n, c, i, j] to it alone,
// every other element of dX being 0. Both passes are vecops kernels
// (MaxPool2, MaxPool2Grad: vector code where the CPU has it).
//
// Which element wins, as gorgonia's MaxPool2D decides it (a scan of the
// window in row-major order keeping an element only when it is strictly
// greater): the first maximum in row-major order on ties (+0 and −0 tie);
// NaN never wins against a number. Where gorgonia is not defined this way,
// we choose: a window of NaN only gives its first NaN, and one whose
// maximum is −Inf gives −Inf (gorgonia starts its scan from −MaxFloat and
// gives −MaxFloat for both); and the gradient always goes to the winner
// (gorgonia records no argmax for a window with nothing above −MaxFloat,
// and its backward then indexes −1 and panics). MaxPool2x2 takes
// graphlock; the models call maxPool2x2 inside their own graphlock.Do.
func MaxPool2x2(x *G.Node) (*G.Node, error) {
	return locked(func() (*G.Node, error) { return maxPool2x2(x) })
}

// maxPool2x2 is MaxPool2x2 for a caller that holds graphlock.
func maxPool2x2(x *G.Node) (*G.Node, error) {
	if x == nil {
		return nil, fmt.Errorf("models: MaxPool2x2: nil node")
	}
	s := x.Shape()
	if s.Dims() != 4 || s[0] <= 0 || s[1] <= 0 || s[2] < 2 || s[3] < 2 {
		return nil, fmt.Errorf("models: MaxPool2x2: x %v, want (batch, channels, h ≥ 2, w ≥ 2)", s)
	}
	if s.TotalSize() > math.MaxInt32 {
		return nil, fmt.Errorf("models: MaxPool2x2: x %v has more than 2³¹−1 elements", s)
	}
	if err := checkDtype(x.Dtype()); err != nil {
		return nil, err
	}
	out, err := G.ApplyOp(&poolOp{in: s.Clone()}, x)
	if err != nil {
		return nil, fmt.Errorf("models: MaxPool2x2: %w", err)
	}
	return out, nil
}

// poolOp: x → y; argmax[o] is the index into x of output o's window's
// winner, as of the last run.
type poolOp struct {
	in     tensor.Shape
	out    outBuffer
	argmax []int32
}

// poolGradOp: (y, dY) → dX, dY scattered to fwd's argmax (y, unread,
// orders it after the forward op).
type poolGradOp struct {
	fwd *poolOp
	out outBuffer
}

var (
	_ G.Op   = (*poolOp)(nil)
	_ G.SDOp = (*poolOp)(nil)
	_ G.Op   = (*poolGradOp)(nil)
)

// outShape is (batch, channels, ⌊h/2⌋, ⌊w/2⌋).
func (op *poolOp) outShape() tensor.Shape {
	return tensor.Shape{op.in[0], op.in[1], op.in[2] / 2, op.in[3] / 2}
}

func (*poolOp) Arity() int     { return 1 }
func (*poolGradOp) Arity() int { return 2 }

// Type: Tensor4 a → Tensor4 a, and Tensor4 a → Tensor4 a → Tensor4 a.
func (*poolOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a))
}

func (*poolGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a), tensor4(a))
}

func (op *poolOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := inferShapes("MaxPool2x2", in, op.in); err != nil {
		return nil, err
	}
	return op.outShape(), nil
}

func (op *poolGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := inferShapes("MaxPool2x2Grad", in, op.fwd.outShape(), op.fwd.outShape()); err != nil {
		return nil, err
	}
	return op.fwd.in.Clone(), nil
}

func (op *poolOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("MaxPool2x2", 1, op, vals, poolDo[float32], poolDo[float64])
}

func poolDo[T float](op *poolOp, vals []G.Value) (G.Value, error) {
	x, err := dataOf[T]("MaxPool2x2", "x", vals[0], op.in.TotalSize())
	if err != nil {
		return nil, err
	}
	out := shaped(&op.out, op.outShape(), vals[0].Dtype())
	op.argmax = grown(op.argmax, op.outShape().TotalSize())
	v, err := vecVariant("MaxPool2x2")
	if err != nil {
		return nil, err
	}
	vecops.MaxPool2(v, x, out.Data().([]T), op.argmax, op.in[0]*op.in[1], op.in[2], op.in[3])
	return out, nil
}

func (op *poolGradOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("MaxPool2x2Grad", 2, op, vals, poolGradDo[float32], poolGradDo[float64])
}

func poolGradDo[T float](op *poolGradOp, vals []G.Value) (G.Value, error) {
	if len(op.fwd.argmax) != op.fwd.outShape().TotalSize() {
		return nil, fmt.Errorf("MaxPool2x2Grad: the forward op has not run")
	}
	dy, err := dataOf[T]("MaxPool2x2Grad", "dY", vals[1], len(op.fwd.argmax))
	if err != nil {
		return nil, err
	}
	out := shaped(&op.out, op.fwd.in, vals[1].Dtype())
	v, err := vecVariant("MaxPool2x2Grad")
	if err != nil {
		return nil, err
	}
	in := op.fwd.in
	vecops.MaxPool2Grad(v, dy, out.Data().([]T), op.fwd.argmax, in[0]*in[1], in[2], in[3])
	return out, nil
}

func (*poolOp) ReturnsPtr() bool     { return false }
func (*poolOp) CallsExtern() bool    { return false }
func (*poolOp) OverwritesInput() int { return -1 }
func (op *poolOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.MaxPool2x2%v", op.in)
}
func (op *poolOp) Hashcode() uint32      { return opHash(op) }
func (op *poolOp) String() string        { return fmt.Sprintf("MaxPool2x2%v", op.in) }
func (*poolGradOp) ReturnsPtr() bool     { return false }
func (*poolGradOp) CallsExtern() bool    { return false }
func (*poolGradOp) OverwritesInput() int { return -1 }
func (op *poolGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.MaxPool2x2Grad%v", op.fwd.in)
}
func (op *poolGradOp) Hashcode() uint32 { return opHash(op) }
func (*poolGradOp) String() string      { return "MaxPool2x2Grad" }

func (*poolOp) DiffWRT(inputs int) []bool { return []bool{true} }

// SymDiff: dX = dY scattered to the argmax of this op's last run.
func (op *poolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("MaxPool2x2.SymDiff: want 1 input, got %d", len(inputs))
	}
	dx, err := G.ApplyOp(&poolGradOp{fwd: op}, output, grad)
	if err != nil {
		return nil, fmt.Errorf("MaxPool2x2.SymDiff: %w", err)
	}
	return G.Nodes{dx}, nil
}
