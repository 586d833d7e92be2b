// Command custom_model shows how to make your own gorgonia model
// data-parallel with ddp.Wrap: a two-layer network written inline (its own
// parameters, G.Mul, G.BroadcastAdd, G.Rectify), trained for a few steps on
// synthetic data by 3 in-process ranks, each with a different part of
// every batch. Rank 0 prints the loss (averaged over ranks) as it goes
// down, and the run ends by checking that every replica holds bitwise the
// same parameters.
//
//	go run ./examples/custom_model
//
// The recipe, per rank:
//  1. build the model's parameters in a graph (under graphlock: gorgonia's
//     graph construction is not safe to run concurrently);
//  2. d := ddp.Wrap(ctx, group, params) moves them into a flat arena and
//     broadcasts rank 0's values;
//  3. build the forward pass from d.Tapped(), not from the parameters, so
//     gradients can be all-reduced as the backward pass produces them;
//  4. d.Backward(loss) adds the backward pass; make the machine;
//  5. each step: fill the inputs, d.Run(ctx, vm), d.Step(ctx, optimizer).
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
)

const (
	ranks       = 3
	perRank     = 16 // examples per rank per step
	side        = 8  // 8×8 images
	classes     = 4
	hidden      = 32
	steps       = 40
	reportEvery = 5
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "custom_model:", err)
		os.Exit(1)
	}
}

// twoLayer is a user-defined model: relu(x·W1 + b1)·W2 + b2.
type twoLayer struct {
	w1, b1, w2, b2 *G.Node
}

// newTwoLayer creates the parameters in g, drawn from U(-1/√fanIn, 1/√fanIn)
// with a seeded generator (gorgonia's initialisers are clock-seeded; every
// rank should start equal, although Wrap broadcasts rank 0's values anyway).
// Call under graphlock.
func newTwoLayer(g *G.ExprGraph, in, hid, out int, seed uint64) *twoLayer {
	rng := rand.New(rand.NewPCG(seed, 1))
	param := func(name string, fanIn int, shape ...int) *G.Node {
		n := 1
		for _, d := range shape {
			n *= d
		}
		bound := 1 / math.Sqrt(float64(fanIn))
		data := make([]float32, n)
		for i := range data {
			data[i] = float32((2*rng.Float64() - 1) * bound)
		}
		v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
		return G.NewMatrix(g, tensor.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
	}
	return &twoLayer{
		w1: param("w1", in, in, hid), b1: param("b1", in, 1, hid),
		w2: param("w2", hid, hid, out), b2: param("b2", hid, 1, out),
	}
}

// params are the learnables in creation order.
func (m *twoLayer) params() G.Nodes { return G.Nodes{m.w1, m.b1, m.w2, m.b2} }

// forward builds the logits from x using p, which stands in for params()
// (ddp's tapped nodes). Call under graphlock.
func (m *twoLayer) forward(x *G.Node, p G.Nodes) (*G.Node, error) {
	h, err := G.Mul(x, p[0])
	if err != nil {
		return nil, err
	}
	if h, err = G.BroadcastAdd(h, p[1], nil, []byte{0}); err != nil {
		return nil, err
	}
	if h, err = G.Rectify(h); err != nil {
		return nil, err
	}
	out, err := G.Mul(h, p[2])
	if err != nil {
		return nil, err
	}
	return G.BroadcastAdd(out, p[3], nil, []byte{0})
}

// run trains and reports to w; it returns the mean loss of every step.
func run(ctx context.Context, w io.Writer) ([]float64, error) {
	data := datasets.Synthetic(ranks*perRank*steps, side, side, classes, 7)
	world, err := inproc.NewWorld(ranks)
	if err != nil {
		return nil, err
	}
	losses := make([]float64, steps)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		g, err := allreduce.NewGroup(world.Conn(r))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close()
			if errs[r] = trainRank(ctx, g, data, losses, w); errs[r] != nil {
				g.Abort(errs[r]) // do not leave the other ranks waiting
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return losses, nil
}

func trainRank(ctx context.Context, group *allreduce.Group, data *datasets.Dataset, losses []float64, w io.Writer) error {
	features := side * side
	graph := G.NewGraph()
	var m *twoLayer
	_ = graphlock.Do(func() error {
		m = newTwoLayer(graph, features, hidden, classes, 42)
		return nil
	})
	d, err := ddp.Wrap[float32](ctx, group, m.params())
	if err != nil {
		return err
	}

	// Inputs bound to buffers we refill every step.
	xs := make([]float32, perRank*features)
	ys := make([]float32, perRank*classes)
	var x, y, logits *G.Node
	err = graphlock.Do(func() error {
		x = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, features), G.WithName("x"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, features), tensor.WithBacking(xs))))
		y = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, classes), G.WithName("y"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, classes), tensor.WithBacking(ys))))
		var err error
		logits, err = m.forward(x, d.Tapped())
		return err
	})
	if err != nil {
		return err
	}
	// A numerically stable fused softmax cross-entropy (takes the lock
	// itself; gorgonia's own SoftMax/LogSumExp are unreliable).
	loss, err := models.CrossEntropy(logits, y)
	if err != nil {
		return err
	}
	if err := d.Backward(loss); err != nil {
		return err
	}
	// Compile only what a step needs (the loss and the parameters'
	// gradients), not the gradient of the input batch that G.Grad builds too.
	var vm G.VM
	_ = graphlock.Do(func() error { vm = G.NewTapeMachine(graph.SubgraphRoots(d.Outputs()...)); return nil })
	defer vm.Close()

	opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.01, Momentum: 0.5})
	if err != nil {
		return err
	}
	rank := group.Rank()
	idx := make([]int, perRank)
	for step := range steps {
		// This rank's part of the global batch of the step.
		for i := range idx {
			idx[i] = (step*ranks+rank)*perRank + i
		}
		if err := data.FillBatch(idx, xs, ys); err != nil {
			return err
		}
		if err := d.Run(ctx, vm); err != nil { // forward + backward + gradient all-reduce
			return err
		}
		if err := d.Step(ctx, opt); err != nil { // SGD on the flat arena
			return err
		}
		// The loss this rank saw, averaged over ranks for reporting.
		l := []float64{float64(loss.Value().Data().(float32))}
		if err := allreduce.AllReduce(ctx, group, l, allreduce.Avg); err != nil {
			return err
		}
		if rank == 0 {
			losses[step] = l[0]
			if step == 0 || (step+1)%reportEvery == 0 {
				st := d.LastStats()
				fmt.Fprintf(w, "step %2d  loss %.4f  (compute %v, comm wait %v)\n", step+1, l[0], st.Compute.Round(1000), st.CommWait.Round(1000))
			}
		}
	}
	if err := d.CheckReplicas(ctx); err != nil {
		return err
	}
	if rank == 0 {
		fmt.Fprintf(w, "%d ranks trained %d steps; all replicas hold identical parameters\n", group.Size(), steps)
	}
	return nil
}
