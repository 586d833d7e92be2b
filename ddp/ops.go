package ddp

import (
	"fmt"
	"hash"
	"hash/fnv"
	"runtime"

	"github.com/chewxy/hm"
	"gonum.org/v1/gonum/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// newTap makes the tap of parameter p: a node of p's graph that joins the
// graph only when the forward pass first uses it, right before that first
// consumer. gorgonia's tape machine runs nodes in creation order, and G.Grad
// differentiates them in the reverse order, creating each parameter's hook
// when it reaches the parameter's tap. A tap created here, before the
// forward pass, would be reached last, after every gradient computation of
// the backward pass, and every hook would run at its very end: no
// communication would overlap the backward pass. Joining at first use puts
// the tap, and so its hook, right after the gradient it reports.
//
// gorgonia has no constructor for such a node: the tap is a clone (which
// belongs to no graph and has no children) of the same op applied to a
// stand-in of p's type and shape in a scratch graph, given p as its child
// and p's graph as its graph. The consumer's construction adds it to the
// graph (gorgonia adds missing children), and joinTaps adds the edge to p.
func newTap(op *tapOp, p *G.Node) (*G.Node, error) {
	g := p.Graph()
	if g == nil {
		return nil, fmt.Errorf("parameter %s belongs to no graph", p.Name())
	}
	stand := G.NewUniqueNode(G.WithType(p.Type()), G.WithShape(p.Shape()...), G.In(G.NewGraph()), G.WithName(p.Name()))
	orig, err := G.ApplyOp(op, stand)
	if err != nil {
		return nil, err
	}
	tap, ok := orig.Clone().(*G.Node)
	if !ok || tap.Graph() != nil {
		return nil, fmt.Errorf("cloning the tap of %s gave a node of a graph", p.Name())
	}
	G.WithChildren(G.Nodes{p})(tap)
	G.In(g)(tap)
	return tap, nil
}

// joinTaps checks that the forward pass used every tap (which put it in
// its parameter's graph) and records the tap as a consumer of its
// parameter, the edge gorgonia's own construction would have added.
func joinTaps(params, taps G.Nodes) error {
	for i, t := range taps {
		p := params[i]
		if g := p.Graph(); t.ID() < 0 || !g.Has(t.ID()) || g.Node(t.ID()) != graph.Node(t) {
			return fmt.Errorf("ddp: parameter %d (%s) is not used by the forward pass: it must use Tapped()[%d], not the parameter itself", i, p.Name(), i)
		}
		p.Graph().SetEdge(tapEdge{tap: t, param: p})
	}
	return nil
}

// tapEdge is the edge from a tap to its parameter (graph.Edge).
type tapEdge struct{ tap, param *G.Node }

func (e tapEdge) From() graph.Node         { return e.tap }
func (e tapEdge) To() graph.Node           { return e.param }
func (e tapEdge) ReversedEdge() graph.Edge { return tapEdge{tap: e.param, param: e.tap} }

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
