// Command comm_hook shows how to write your own DDP communication hook
// (PyTorch's register_comm_hook) and register it with ddp.WithCommHook: a
// hook that wraps a built-in one (bf16 compression with error feedback)
// and, once the bucket is reduced, records the norm of every parameter's
// averaged gradient, as one would to monitor training or to clip
// gradients. Two in-process ranks train an MLP (models.NewMLP) on
// synthetic data; rank 0 prints the loss and the gradient norms as it
// goes, and the run ends by checking that the replicas agree.
//
//	go run ./examples/comm_hook
//
// A hook sees one bucket at a time (ddp.GradBucket): its index, its flat
// gradient buffer, each parameter's index, offset and shape in it,
// whether it is the step's last bucket, and the group. It must leave the
// averaged gradient (or its approximation) in the buffer on every rank,
// calling the same collectives in the same order on every rank. It runs
// on the DDP's communication goroutine while the backward pass goes on
// (the last bucket on Run's goroutine, after it).
package main

import (
	"context"
	"fmt"
	"io"
	"math"
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
	ranks       = 2
	perRank     = 32
	side        = 8 // 8×8 images
	classes     = 4
	steps       = 30
	reportEvery = 10
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "comm_hook:", err)
		os.Exit(1)
	}
}

// normHook is the user's hook: inner reduces the bucket, then the norm of
// each parameter's averaged gradient is kept by parameter index.
type normHook struct {
	inner ddp.CommHook[float32]
	norms map[int]float64 // the last step's, by parameter index
	steps int             // steps completed (last buckets seen)
}

// Reduce implements ddp.CommHook.
func (h *normHook) Reduce(ctx context.Context, b *ddp.GradBucket[float32]) error {
	if err := h.inner.Reduce(ctx, b); err != nil {
		return err
	}
	for k := range b.Len() {
		var ss float64
		for _, v := range b.Gradient(k) {
			ss += float64(v) * float64(v)
		}
		h.norms[b.Parameter(k)] = math.Sqrt(ss)
	}
	if b.IsLast() {
		h.steps++
	}
	return nil
}

// result is what a run returns: rank 0's loss per step (averaged over
// ranks), and its hook and wrapper after the last step.
type result struct {
	losses []float64
	hook   *normHook
	ddp    *ddp.DDP[float32]
}

func run(ctx context.Context, w io.Writer) (*result, error) {
	data := datasets.Synthetic(ranks*perRank*steps, side, side, classes, 3)
	world, err := inproc.NewWorld(ranks)
	if err != nil {
		return nil, err
	}
	res := &result{losses: make([]float64, steps)}
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
			if errs[r] = trainRank(ctx, g, data, res, w); errs[r] != nil {
				g.Abort(errs[r])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return res, nil
}

func trainRank(ctx context.Context, group *allreduce.Group, data *datasets.Dataset, res *result, w io.Writer) error {
	features := side * side
	graph := G.NewGraph()
	model, err := models.NewMLP(graph, tensor.Float32, 1, features, 32, classes) // takes graphlock itself
	if err != nil {
		return err
	}
	// One hook per rank: hooks keep per-bucket state (here the error
	// feedback of the bf16 compression inside).
	bf16, err := ddp.NewCompression[float32](ddp.BF16, true)
	if err != nil {
		return err
	}
	hook := &normHook{inner: bf16, norms: map[int]float64{}}
	d, err := ddp.Wrap[float32](ctx, group, model.Learnables(), ddp.WithCommHook[float32](hook))
	if err != nil {
		return err
	}
	xs, ys := make([]float32, perRank*features), make([]float32, perRank*classes)
	var x, y, logits *G.Node
	err = graphlock.Do(func() error {
		x = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, features), G.WithName("x"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, features), tensor.WithBacking(xs))))
		y = G.NewMatrix(graph, tensor.Float32, G.WithShape(perRank, classes), G.WithName("y"),
			G.WithValue(tensor.New(tensor.WithShape(perRank, classes), tensor.WithBacking(ys))))
		return nil
	})
	if err != nil {
		return err
	}
	if logits, err = model.Forward(x, d.Tapped()); err != nil { // takes graphlock itself
		return err
	}
	loss, err := models.CrossEntropy(logits, y)
	if err != nil {
		return err
	}
	if err := d.Backward(loss); err != nil {
		return err
	}
	var vm G.VM
	_ = graphlock.Do(func() error { vm = G.NewTapeMachine(graph.SubgraphRoots(d.Outputs()...)); return nil })
	defer vm.Close()
	opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.05, Momentum: 0.5})
	if err != nil {
		return err
	}
	rank := group.Rank()
	idx := make([]int, perRank)
	for step := range steps {
		for i := range idx {
			idx[i] = (step*ranks+rank)*perRank + i
		}
		if err := data.FillBatch(idx, xs, ys); err != nil {
			return err
		}
		if err := d.Run(ctx, vm); err != nil { // forward, backward, the hook on every bucket
			return err
		}
		if err := d.Step(ctx, opt); err != nil {
			return err
		}
		l := []float64{float64(loss.Value().Data().(float32))}
		if err := allreduce.AllReduce(ctx, group, l, allreduce.Avg); err != nil {
			return err
		}
		if rank == 0 {
			res.losses[step] = l[0]
			if step == 0 || (step+1)%reportEvery == 0 {
				fmt.Fprintf(w, "step %2d  loss %.4f  gradient norms", step+1, l[0])
				for i, p := range d.Params() {
					fmt.Fprintf(w, "  %s %.4f", p.Name(), hook.norms[i])
				}
				fmt.Fprintln(w)
			}
		}
	}
	if err := d.CheckReplicas(ctx); err != nil {
		return err
	}
	if rank == 0 {
		res.hook, res.ddp = hook, d
		fmt.Fprintf(w, "%d ranks trained %d steps with a bf16-compressing, norm-recording hook; all replicas hold identical parameters\n", group.Size(), steps)
	}
	return nil
}
