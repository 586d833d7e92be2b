package ddp

import (
	"fmt"
	"hash"
	"hash/fnv"
	"runtime"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradSink receives parameter index i's complete gradient mid-backward.
type gradSink interface {
	gradReady(i int, grad G.Value) error
}

// tapOp is the identity on parameter i, whose derivative is a hookOp. Its
// forward copies the parameter into a buffer of its own rather than
// returning the parameter's value: gorgonia's tape may reuse an op's output
// memory for later results, which must never be the parameter arena.
type tapOp struct {
	index int
	sink  gradSink
	id    uint64 // distinguishes the taps of different wrappers
	out   *tensor.Dense
}

func (op *tapOp) Arity() int { return 1 }

func (op *tapOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *tapOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("ddp tap: want 1 input, got %d", len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("ddp tap: input is not a shape")
	}
	return s.Clone(), nil
}

func (op *tapOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, fmt.Errorf("ddp tap: want 1 input, got %d", len(vals))
	}
	in, ok := vals[0].(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("ddp tap: parameter value is %T, want *tensor.Dense", vals[0])
	}
	if op.out == nil || !op.out.Shape().Eq(in.Shape()) || op.out.Dtype() != in.Dtype() {
		op.out = tensor.New(tensor.WithShape(in.Shape().Clone()...), tensor.Of(in.Dtype()))
	}
	if err := tensor.Copy(op.out, in); err != nil {
		return nil, fmt.Errorf("ddp tap: %w", err)
	}
	runtime.Gosched() // interleave oversubscribed ranks layer by layer (see gradReady)
	return op.out, nil
}

func (op *tapOp) ReturnsPtr() bool     { return false }
func (op *tapOp) CallsExtern() bool    { return false }
func (op *tapOp) OverwritesInput() int { return -1 }
func (op *tapOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.tap(%d,%d)", op.id, op.index)
}
func (op *tapOp) Hashcode() uint32 { return hashOf(op) }
func (op *tapOp) String() string   { return fmt.Sprintf("DDPTap(%d)", op.index) }

func (op *tapOp) DiffWRT(inputs int) []bool { return []bool{true} }

func (op *tapOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	hooked, err := G.ApplyOp(&hookOp{index: op.index, sink: op.sink, id: op.id}, grad)
	if err != nil {
		return nil, fmt.Errorf("ddp tap: hooking gradient of parameter %d: %w", op.index, err)
	}
	return G.Nodes{hooked}, nil
}

// hookOp is the identity on parameter index's gradient that reports it.
type hookOp struct {
	index int
	sink  gradSink
	id    uint64
}

func (op *hookOp) Arity() int { return 1 }

func (op *hookOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *hookOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("ddp hook: want 1 input, got %d", len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("ddp hook: input is not a shape")
	}
	return s.Clone(), nil
}

func (op *hookOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, fmt.Errorf("ddp hook: want 1 input, got %d", len(vals))
	}
	if err := op.sink.gradReady(op.index, vals[0]); err != nil {
		return nil, err
	}
	return vals[0], nil
}

func (op *hookOp) ReturnsPtr() bool     { return false }
func (op *hookOp) CallsExtern() bool    { return false }
func (op *hookOp) OverwritesInput() int { return -1 }
func (op *hookOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.hook(%d,%d)", op.id, op.index)
}
func (op *hookOp) Hashcode() uint32 { return hashOf(op) }
func (op *hookOp) String() string   { return fmt.Sprintf("DDPHook(%d)", op.index) }

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
