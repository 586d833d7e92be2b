package ddp_test

import (
	"context"
	"fmt"
	"hash"
	"strings"
	"testing"
	"time"

	"github.com/chewxy/hm"
	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
)

// probeOp is the identity; its gradient is probeGradOp, the identity that
// calls seen when the backward pass runs it.
type probeOp struct{ seen func() }

func (op probeOp) Arity() int { return 1 }
func (op probeOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op probeOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (op probeOp) Do(vals ...G.Value) (G.Value, error) {
	return vals[0].(*tensor.Dense).Clone().(*tensor.Dense), nil
}
func (op probeOp) ReturnsPtr() bool          { return false }
func (op probeOp) CallsExtern() bool         { return false }
func (op probeOp) OverwritesInput() int      { return -1 }
func (op probeOp) WriteHash(h hash.Hash)     { fmt.Fprint(h, "probe") }
func (op probeOp) Hashcode() uint32          { return 1 }
func (op probeOp) String() string            { return "probe" }
func (op probeOp) DiffWRT(inputs int) []bool { return []bool{true} }
func (op probeOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	n, err := G.ApplyOp(probeGradOp(op), grad)
	return G.Nodes{n}, err
}

type probeGradOp probeOp

func (op probeGradOp) Arity() int    { return 1 }
func (op probeGradOp) Type() hm.Type { return probeOp(op).Type() }
func (op probeGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return probeOp(op).InferShape(in...)
}
func (op probeGradOp) Do(vals ...G.Value) (G.Value, error) {
	op.seen()
	return probeOp(op).Do(vals...)
}
func (op probeGradOp) ReturnsPtr() bool      { return false }
func (op probeGradOp) CallsExtern() bool     { return false }
func (op probeGradOp) OverwritesInput() int  { return -1 }
func (op probeGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "probe-grad") }
func (op probeGradOp) Hashcode() uint32      { return 2 }
func (op probeGradOp) String() string        { return "probe-grad" }

// TestHookRunsBeforeEarlierLayersBackward: a parameter's gradient hook runs
// as soon as the backward pass has computed that gradient, before it goes
// on to earlier layers, so its bucket's communication overlaps their
// backward pass. gorgonia runs nodes in creation order; were the taps
// created in Wrap, before the forward pass, every hook would run after the
// whole backward pass. The probe sits between the two layers: its gradient
// runs after layer 1's backward and before layer 0's.
func TestHookRunsBeforeEarlierLayersBackward(t *testing.T) {
	errs := allreducetest.RunInproc(2, 20*time.Second, func(g *allreduce.Group) error {
		gr := G.NewGraph()
		var w0, w1, x *G.Node
		require.NoError(t, graphlock.Do(func() error {
			w0 = G.NewMatrix(gr, tensor.Float64, G.WithShape(4, 3), G.WithName("w0"), G.WithInit(G.Ones()))
			w1 = G.NewMatrix(gr, tensor.Float64, G.WithShape(3, 2), G.WithName("w1"), G.WithInit(G.Ones()))
			x = G.NewMatrix(gr, tensor.Float64, G.WithShape(5, 4), G.WithName("x"), G.WithInit(G.Ones()))
			return nil
		}))
		// Each parameter its own bucket: w1 (the later layer) first.
		d, err := ddp.Wrap[float64](context.Background(), g, G.Nodes{w0, w1}, ddp.WithBucketBytes(8, 8))
		if err != nil {
			return err
		}
		hooksAtProbe := -1
		var loss *G.Node
		err = graphlock.Do(func() error {
			tap := d.Tapped()
			h, err := G.ApplyOp(probeOp{seen: func() { hooksAtProbe = len(d.HookOrder()) }}, G.Must(G.Mul(x, tap[0])))
			if err != nil {
				return err
			}
			loss, err = G.Sum(G.Must(G.Mul(h, tap[1])))
			return err
		})
		if err != nil {
			return err
		}
		if err := d.Backward(loss); err != nil {
			return err
		}
		var vm G.VM
		require.NoError(t, graphlock.Do(func() error { vm = G.NewTapeMachine(gr); return nil }))
		defer vm.Close()
		if err := d.Run(context.Background(), vm); err != nil {
			return err
		}
		if hooksAtProbe != 1 || d.HookOrder()[0] != 1 {
			return fmt.Errorf("when the backward pass reached layer 0, %d hooks had run (want 1: w1's); hook order %v", hooksAtProbe, d.HookOrder())
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// TestForwardMustUseTaps: a forward pass that uses a parameter itself
// instead of its tap is an error at Backward naming the parameter.
func TestForwardMustUseTaps(t *testing.T) {
	errs := allreducetest.RunInproc(1, 5*time.Second, func(g *allreduce.Group) error {
		gr := G.NewGraph()
		w := G.NewMatrix(gr, tensor.Float64, G.WithShape(2, 2), G.WithName("w"), G.WithInit(G.Ones()))
		b := G.NewVector(gr, tensor.Float64, G.WithShape(2), G.WithName("b"), G.WithInit(G.Ones()))
		d, err := ddp.Wrap[float64](context.Background(), g, G.Nodes{w, b})
		if err != nil {
			return err
		}
		loss := G.Must(G.Add(G.Must(G.Sum(d.Tapped()[0])), G.Must(G.Sum(b))))
		err = d.Backward(loss)
		if err == nil {
			return fmt.Errorf("Backward accepted a forward pass that uses parameter b itself")
		}
		if want := "parameter 1 (b) is not used by the forward pass"; !strings.Contains(err.Error(), want) {
			return fmt.Errorf("error %q does not say %q", err, want)
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}
