package trainer

import (
	"context"
	"fmt"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/internal/trace"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
)

// worker is one rank's state: its model replica, training graph, data
// sampler and evaluator.
type worker[T Float] struct {
	cfg         Config
	g           *allreduce.Group
	comm        context.Context // collectives: not cancelled with the run's context
	train, test *datasets.Dataset

	params  G.Nodes // the training model's learnables, creation order
	rep     replica[T]
	d       *ddp.DDP[T] // rep.DDP(): arenas, layout, statistics, agreement
	vm      G.VM
	vms     machines // the step's machines: vm, and those leaving parameters out (unused.go)
	x, y    []T      // the training inputs' backing, refilled every step
	sampler *datasets.DistributedSampler
	whole   *datasets.DistributedSampler // the global batches: one replica (usage.go)
	members []int                        // the job-start rank of each rank of g (nil: rank r is r; survive_zero.go)
	perRank int                          // this rank's examples per step (split.go)
	uneven  bool                         // the world size does not divide the global batch
	steps   int                          // per epoch
	eval    *evaluator[T]
	rec     *trace.Recorder // the timeline; nil: none
	spans   *commSpans      // the step's bucket collectives, for the hidden communication
}

func newModel(g *G.ExprGraph, cfg Config, dt tensor.Dtype, features, classes int) (models.Model, error) {
	if cfg.NewModel != nil {
		return cfg.NewModel(g, dt, cfg.Seed, features, classes)
	}
	if cfg.Model == ModelCNN {
		return models.NewLeNet(g, dt, cfg.Seed)
	}
	sizes := append([]int{features}, cfg.hidden()...)
	return models.NewMLP(g, dt, cfg.Seed, append(sizes, classes)...)
}

func newOptimizer[T Float](cfg Config) (optim.Optimizer[T], error) {
	switch cfg.Optim {
	case OptimSGD:
		return optim.NewSGD[T](optim.SGDConfig{LR: cfg.LR, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay})
	case OptimAdam:
		c := optim.DefaultAdamConfig()
		c.LR, c.WeightDecay = cfg.LR, cfg.WeightDecay
		return optim.NewAdam[T](c)
	default:
		c := optim.DefaultAdamWConfig()
		c.LR, c.WeightDecay = cfg.LR, cfg.WeightDecay
		return optim.NewAdamW[T](c)
	}
}

func dtypeOf[T Float]() tensor.Dtype {
	var z T
	if unsafe.Sizeof(z) == 4 {
		return tensor.Float32
	}
	return tensor.Float64
}

// fill writes the examples idx into x (and y, one-hot, unless nil).
func fill[T Float](ds *datasets.Dataset, idx []int, x, y []T) error {
	switch xs := any(x).(type) {
	case []float32:
		return ds.FillBatch(idx, xs, any(y).([]float32))
	case []float64:
		return ds.FillBatch64(idx, xs, any(y).([]float64))
	}
	return fmt.Errorf("trainer: unsupported element type %T", x)
}

// newWorker builds rank g.Rank()'s sampler, model replica, training graph
// and evaluator. The replica votes to stop once ctx is done.
func newWorker[T Float](ctx context.Context, cfg Config, g *allreduce.Group, train, test *datasets.Dataset, env rankEnv) (*worker[T], error) {
	w := &worker[T]{cfg: cfg, g: g, comm: context.WithoutCancel(ctx), train: train, test: test, rec: env.rec, spans: &commSpans{}}
	env.spans = w.spans
	n := g.Size()
	if cfg.GlobalBatch < n {
		return nil, fmt.Errorf("trainer: batch = %d is smaller than the world size %d: a rank would have no example", cfg.GlobalBatch, n)
	}
	w.perRank, w.uneven = share(cfg.GlobalBatch, n, g.Rank()), cfg.GlobalBatch%n != 0
	var err error
	w.sampler, err = datasets.NewDistributedSampler(train.Len(), n, g.Rank(),
		datasets.WithSeed(cfg.Seed), datasets.WithShuffle(true), datasets.WithDropLast(true))
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	w.whole, err = datasets.NewDistributedSampler(train.Len(), 1, 0,
		datasets.WithSeed(cfg.Seed), datasets.WithShuffle(true), datasets.WithDropLast(true))
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	w.steps = w.sampler.NumBatches(w.perRank, true)
	if w.uneven {
		w.steps = w.whole.NumBatches(cfg.GlobalBatch, true)
	}
	if w.steps == 0 {
		return nil, fmt.Errorf("trainer: batch = %d is larger than the %d training examples (%d per rank): no full step per epoch",
			cfg.GlobalBatch, train.Len(), w.sampler.Len())
	}

	dt := dtypeOf[T]()
	features, classes := train.Features(), train.Classes()
	graph := G.NewGraph()
	model, err := newModel(graph, cfg, dt, features, classes)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	w.params = model.Learnables()
	opt, err := newOptimizer[T](cfg)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if w.rep, err = newReplica(w.comm, cfg, g, w.params, opt, func() bool { return ctx.Err() != nil }, env); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	w.d = w.rep.DDP()
	w.x = make([]T, w.perRank*features)
	w.y = make([]T, w.perRank*classes)
	var x, y *G.Node
	err = graphlock.Do(func() error {
		x = G.NewMatrix(graph, dt, G.WithShape(w.perRank, features), G.WithName("x"),
			G.WithValue(tensor.New(tensor.WithShape(w.perRank, features), tensor.WithBacking(w.x))))
		y = G.NewMatrix(graph, dt, G.WithShape(w.perRank, classes), G.WithName("y"),
			G.WithValue(tensor.New(tensor.WithShape(w.perRank, classes), tensor.WithBacking(w.y))))
		return nil
	})
	if err != nil {
		return nil, err
	}
	logits, err := model.Forward(x, w.rep.Tapped())
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	loss, err := models.CrossEntropy(logits, y)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if loss, err = weightLoss(loss, cfg.GlobalBatch, n, g.Rank()); err != nil {
		return nil, err
	}
	if err := w.rep.Backward(loss); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	// Only what the step needs: the loss and the parameters' gradients
	// (not the gradient of the input batch that gorgonia's Grad also builds).
	if err := graphlock.Do(func() error {
		w.vm = G.NewTapeMachine(graph.SubgraphRoots(w.d.Outputs()...))
		return nil
	}); err != nil {
		return nil, err
	}
	w.vms.full = w.vm
	w.vms.skip, _ = model.(skipper)
	w.vms.outputs, w.vms.graph = w.d.Outputs, graph
	lo, hi := allreduce.ChunkBounds(test.Len(), n, g.Rank())
	if w.eval, err = newEvaluator(cfg, w.d, test, lo, hi); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *worker[T]) close() {
	if w.vm != nil {
		_ = w.vm.Close()
	}
	w.vms.close()
	if w.eval != nil && w.eval.vm != nil {
		_ = w.eval.vm.Close()
	}
}
