// Package trainer is the data-parallel training loop behind cmd/train,
// usable (and tested) without the command line.
//
// Run trains a models.MLP or models.LeNet on an MNIST-style dataset over
// Config.Ranks ranks. Each rank is a goroutine with its own gorgonia graph
// (built under graphlock), its own model replica initialised from
// the same seed (ddp.Wrap broadcasts rank 0's values anyway), its own
// optimizer, and its own seeded datasets.DistributedSampler with drop-last:
// graphs have static shapes, so every step every rank takes exactly
// GlobalBatch/Ranks examples, filled into input buffers allocated once.
//
// A step is: fill the batch, ddp Run (forward and backward, gradient
// buckets all-reduced while the backward pass runs), ddp Step (the
// optimizer on the flat arena), then one tiny all-reduce of the step's
// loss and a stop flag, so that every rank reports the same mean loss and
// all ranks agree on the step to stop after when the context is cancelled.
//
// After each epoch the test set is evaluated sharded over the ranks (rank r
// takes the contiguous chunk allreduce.ChunkBounds(len, N, r)) with a
// forward-only graph per rank whose parameters are views of the ddp
// parameter arena, so it always sees the current values without copying.
// The evaluation graph has a fixed batch (EvalBatch); the last batch of a
// shard is padded and only its real rows are counted, so every test
// example is counted exactly once. Correct counts and loss sums are
// combined with an all-reduce Sum.
//
// Checkpoints (see checkpoint.go for the layout) are written by rank 0,
// atomically, in safetensors, after every epoch and when a run stops early
// (MaxSteps or cancellation). Resuming validates the file (checksums,
// format) and the run (model, dtype, hidden widths, global batch, seed,
// optimizer and its hyper-parameters; a mismatch names the field), loads
// the parameters into every rank's arena and the optimizer state via
// LoadState, and continues at the exact sampler position: the same epoch
// and the same next batch. With the same number of ranks a run stopped by
// MaxSteps and resumed ends with bitwise the same parameters as one that
// was never interrupted.
//
// Resuming with a different number of ranks is allowed: DDP's optimizer
// state is the same on every rank and does not depend on the world size.
// The position is then taken as the same epoch and the same number of
// steps into it; since the global batch is unchanged, that is the same
// number of the epoch's samples consumed, but the sampler deals indices to
// ranks by world size, so which samples remain differs from what the
// original world would have used (and the epoch may have a different
// number of steps; a position past the new end starts the next epoch).
package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// Float is the element type a run trains in.
type Float interface{ float32 | float64 }

// Run trains as cfg says and returns the per-epoch metrics, the final
// position and parameters. When the context is cancelled the ranks finish
// the step in progress, agree to stop, write a checkpoint (if
// cfg.Checkpoint is set) and Run returns the result with Stop ==
// StopInterrupted together with an error wrapping ctx.Err().
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	train, test, err := loadData(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkData(cfg, train, test); err != nil {
		return nil, err
	}
	var ck *checkpoint
	if cfg.Resume != "" {
		if ck, err = readCheckpoint(cfg.Resume); err != nil {
			return nil, err
		}
		if err := ck.checkConfig(cfg); err != nil {
			return nil, err
		}
	}
	conns, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.DType == Float64 {
		return runRanks[float64](ctx, cfg, train, test, ck, conns)
	}
	return runRanks[float32](ctx, cfg, train, test, ck, conns)
}

func loadData(ctx context.Context, cfg Config) (train, test *datasets.Dataset, err error) {
	if cfg.Train != nil {
		return cfg.Train, cfg.Test, nil
	}
	train, test, err = datasets.LoadMNIST(ctx, cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: loading data: %w", err)
	}
	return train, test, nil
}

func checkData(cfg Config, train, test *datasets.Dataset) error {
	if train.Features() != test.Features() || train.Classes() != test.Classes() {
		return fmt.Errorf("trainer: train set has %d features and %d classes, test set %d and %d",
			train.Features(), train.Classes(), test.Features(), test.Classes())
	}
	if cfg.Model == ModelCNN && (train.Rows() != 28 || train.Cols() != 28 || train.Classes() != 10) {
		return fmt.Errorf("trainer: the cnn (LeNet) needs 28×28 images in 10 classes, the data has %d×%d in %d",
			train.Rows(), train.Cols(), train.Classes())
	}
	if test.Len() == 0 {
		return errors.New("trainer: the test set is empty")
	}
	return nil
}

func connect(ctx context.Context, cfg Config) ([]transport.Conn, error) {
	if cfg.Connect != nil {
		conns, err := cfg.Connect(ctx, cfg.Ranks)
		if err != nil {
			return nil, fmt.Errorf("trainer: connecting: %w", err)
		}
		if len(conns) == 0 {
			return nil, errors.New("trainer: connecting: no endpoints")
		}
		return conns, nil
	}
	w, err := inproc.NewWorld(cfg.Ranks, inproc.WithTimeout(cfg.CommTimeout))
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	conns := make([]transport.Conn, cfg.Ranks)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	return conns, nil
}

// runRanks drives every endpoint on its own goroutine and returns rank 0's
// result (or the first endpoint's, if this process does not hold rank 0).
func runRanks[T Float](ctx context.Context, cfg Config, train, test *datasets.Dataset, ck *checkpoint, conns []transport.Conn) (*Result, error) {
	groups := make([]*allreduce.Group, len(conns))
	for i, c := range conns {
		g, err := allreduce.NewGroup(c)
		if err != nil {
			for _, g := range groups[:i] {
				_ = g.Close()
			}
			for _, c := range conns[i:] {
				_ = c.Close()
			}
			return nil, fmt.Errorf("trainer: %w", err)
		}
		groups[i] = g
	}
	results := make([]*Result, len(conns))
	errs := make([]error, len(conns))
	done := make(chan struct{})
	for i, g := range groups {
		go func() {
			defer func() { done <- struct{}{} }()
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("trainer: rank %d panicked: %v", g.Rank(), p)
					g.Abort(errs[i])
				}
			}()
			results[i], errs[i] = runRank[T](ctx, cfg, g, train, test, ck)
			if errs[i] != nil && !errors.Is(errs[i], context.Canceled) && !errors.Is(errs[i], context.DeadlineExceeded) {
				g.Abort(fmt.Errorf("rank %d failed: %w", g.Rank(), errs[i]))
			}
		}()
	}
	for range groups {
		<-done
	}
	for _, g := range groups {
		_ = g.Close()
	}
	lead := 0
	for i, g := range groups {
		if g.Rank() == 0 {
			lead = i
		}
	}
	return results[lead], rootCause(errs, groups)
}

// rootCause picks the error to report: the first one that is not merely a
// consequence of another rank's failure.
func rootCause(errs []error, groups []*allreduce.Group) error {
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		err = fmt.Errorf("rank %d: %w", groups[i].Rank(), err)
		if first == nil {
			first = err
		}
		if !errors.Is(err, allreduce.ErrGroupFailed) && !errors.Is(err, transport.ErrPeer) {
			return err
		}
	}
	return first
}

// worker is one rank's state.
type worker[T Float] struct {
	cfg         Config
	g           *allreduce.Group
	comm        context.Context // collectives: not cancelled with the run's context
	train, test *datasets.Dataset

	params  G.Nodes // the training model's learnables, creation order
	d       *ddp.DDP[T]
	z       *zero.ZeRO1[T] // nil without Config.Zero1
	vm      G.VM
	loss    *G.Node
	x, y    []T // the training inputs' backing, refilled every step
	opt     optim.Optimizer[T]
	sampler *datasets.DistributedSampler
	perRank int
	steps   int // per epoch
	eval    *evaluator[T]
}

func newModel(g *G.ExprGraph, cfg Config, dt tensor.Dtype, features, classes int) (models.Model, error) {
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

func newWorker[T Float](ctx context.Context, cfg Config, g *allreduce.Group, train, test *datasets.Dataset) (*worker[T], error) {
	w := &worker[T]{cfg: cfg, g: g, comm: context.WithoutCancel(ctx), train: train, test: test}
	n := g.Size()
	w.perRank = cfg.GlobalBatch / n
	if cfg.GlobalBatch%n != 0 {
		return nil, fmt.Errorf("trainer: batch = %d is not divisible by the world size %d", cfg.GlobalBatch, n)
	}
	var err error
	w.sampler, err = datasets.NewDistributedSampler(train.Len(), n, g.Rank(),
		datasets.WithSeed(cfg.Seed), datasets.WithShuffle(true), datasets.WithDropLast(true))
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	w.steps = w.sampler.NumBatches(w.perRank, true)
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
	if w.opt, err = newOptimizer[T](cfg); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	first, rest := cfg.bucketBytes()
	if cfg.Zero1 {
		w.z, err = zero.Wrap[T](w.comm, g, w.params, w.opt, ddp.WithBucketBytes(first, rest))
		if w.z != nil {
			w.d = w.z.DDP()
		}
	} else {
		w.d, err = ddp.Wrap[T](w.comm, g, w.params, ddp.WithBucketBytes(first, rest))
	}
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
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
	logits, err := model.Forward(x, w.d.Tapped())
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if w.loss, err = models.CrossEntropy(logits, y); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if err := w.d.Backward(w.loss); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	if err := graphlock.Do(func() error { w.vm = G.NewTapeMachine(graph); return nil }); err != nil {
		return nil, err
	}
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
	if w.eval != nil && w.eval.vm != nil {
		_ = w.eval.vm.Close()
	}
}

// scalar reads a scalar node value.
func scalar(v G.Value) (float64, error) {
	switch x := v.(type) {
	case *G.F32:
		return float64(*x), nil
	case *G.F64:
		return float64(*x), nil
	case tensor.Tensor:
		if x.Shape().TotalSize() == 1 {
			switch d := x.Data().(type) {
			case float32:
				return float64(d), nil
			case float64:
				return d, nil
			case []float32:
				return float64(d[0]), nil
			case []float64:
				return d[0], nil
			}
		}
	}
	return 0, fmt.Errorf("trainer: loss value is %T, want a float scalar", v)
}

// position is where training stands.
type position struct {
	epoch, step int // 0-based epoch in progress; steps of it done
	global      int64
	lossSum     float64 // the epoch's train-loss sum so far
	lossSteps   int
}

func (w *worker[T]) info(p position) CheckpointInfo {
	cfg := w.cfg
	return CheckpointInfo{
		Model: cfg.Model, DType: cfg.DType, Hidden: cfg.hidden(), GlobalBatch: cfg.GlobalBatch,
		Ranks: w.g.Size(), Seed: cfg.Seed,
		Epoch: p.epoch, StepInEpoch: p.step, GlobalStep: p.global, StepsPerEpoch: w.steps,
		EpochLossSum: p.lossSum, EpochLossSteps: p.lossSteps,
	}
}

// checkpoint writes a checkpoint at p from rank 0; it returns the path
// written ("" when none).
// step runs the optimizer (ZeRO-1: on this rank's shard, then the
// all-gather) and returns the time in the optimizer and, for ZeRO-1, in the
// all-gather, which is communication the backward pass cannot hide.
func (w *worker[T]) step() (opt, comm time.Duration, err error) {
	if w.z == nil {
		err = w.d.Step(w.comm, w.opt)
		return w.d.LastStats().Optimizer, 0, err
	}
	start := time.Now()
	err = w.z.Step(w.comm)
	opt = w.z.LastOptimizerTime()
	return opt, time.Since(start) - opt, err
}

// fullOptimizerState is the optimizer state over the whole arena. With
// ZeRO-1 it is gathered from every rank, so every rank must call it.
func (w *worker[T]) fullOptimizerState() (optim.State, error) {
	if w.z == nil {
		return w.opt.State(), nil
	}
	return w.z.FullOptimizerState(w.comm)
}

// loadOptimizerState loads a full optimizer state (ZeRO-1: this rank's
// shard of it).
func (w *worker[T]) loadOptimizerState(st optim.State) error {
	if w.z == nil {
		return w.opt.LoadState(st)
	}
	return w.z.LoadFullOptimizerState(st)
}

func (w *worker[T]) checkpoint(p position) (string, error) {
	if w.cfg.Checkpoint == "" {
		return "", nil
	}
	st, err := w.fullOptimizerState()
	if err != nil {
		return "", fmt.Errorf("trainer: gathering the optimizer state: %w", err)
	}
	if w.g.Rank() != 0 {
		return "", nil
	}
	if err := writeCheckpoint(w.cfg.Checkpoint, w.info(p), w.params, w.d, st); err != nil {
		return "", fmt.Errorf("trainer: writing checkpoint: %w", err)
	}
	return w.cfg.Checkpoint, nil
}

func runRank[T Float](ctx context.Context, cfg Config, g *allreduce.Group, train, test *datasets.Dataset, ck *checkpoint) (*Result, error) {
	w, err := newWorker[T](ctx, cfg, g, train, test)
	if err != nil {
		return nil, err
	}
	defer w.close()
	var pos position
	if ck != nil {
		if err := restoreCheckpoint(ck, w.params, w.d, w.loadOptimizerState); err != nil {
			return nil, err
		}
		pos = position{epoch: ck.Epoch, step: ck.StepInEpoch, global: ck.GlobalStep,
			lossSum: ck.EpochLossSum, lossSteps: ck.EpochLossSteps}
		if pos.step >= w.steps { // a different world size: fewer steps per epoch
			pos = position{epoch: pos.epoch + 1, global: pos.global}
		}
	}
	lead := g.Rank() == 0
	paramCount := len(w.d.ParamArena())
	paramBytes := int64(paramCount) * int64(unsafe.Sizeof(T(0)))
	commBytes := CommBytesPerStep(paramBytes, g.Size())
	if lead && cfg.OnStart != nil {
		cfg.OnStart(Plan{
			Model: cfg.Model, DType: cfg.DType, Optim: cfg.Optim, Ranks: g.Size(),
			GlobalBatch: cfg.GlobalBatch, PerRankBatch: w.perRank, StepsPerEpoch: w.steps, Epochs: cfg.Epochs,
			TrainExamples: train.Len(), TestExamples: test.Len(),
			Params: paramCount, ParamBytes: paramBytes, Buckets: len(w.d.BucketRanges()), CommBytesPerStep: commBytes,
			LR: cfg.LR, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay,
			Resumed: ck != nil, StartEpoch: pos.epoch, StartStep: pos.step, GlobalStep: pos.global,
		})
	}

	res := &Result{Stop: StopDone}
	stop := Stop("")
	for e := pos.epoch; e < cfg.Epochs && stop == ""; e++ {
		w.sampler.SetEpoch(e)
		if e != pos.epoch {
			pos = position{epoch: e, global: pos.global}
		}
		var compute, commWait, optTime time.Duration
		stepsRun := 0
		start := time.Now()
		for s := pos.step; s < w.steps; s++ {
			if cfg.MaxSteps > 0 && pos.global >= cfg.MaxSteps {
				stop = StopMaxSteps
				break
			}
			if err := fill(train, w.sampler.Batch(s, w.perRank), w.x, w.y); err != nil {
				return nil, fmt.Errorf("trainer: %w", err)
			}
			if err := w.d.Run(w.comm, w.vm); err != nil {
				return nil, fmt.Errorf("trainer: epoch %d step %d: %w", e+1, s+1, err)
			}
			loss, err := scalar(w.loss.Value())
			if err != nil {
				return nil, err
			}
			stepOpt, stepComm, err := w.step()
			if err != nil {
				return nil, fmt.Errorf("trainer: epoch %d step %d: %w", e+1, s+1, err)
			}
			st := w.d.LastStats()
			compute += st.Compute
			commWait += st.CommWait + stepComm
			optTime += stepOpt
			stepsRun++
			// Agree on the mean loss and on stopping.
			flag := 0.0
			if ctx.Err() != nil {
				flag = 1
			}
			agree := []float64{loss, flag}
			if err := allreduce.AllReduce(w.comm, g, agree, allreduce.Sum); err != nil {
				return nil, fmt.Errorf("trainer: epoch %d step %d: %w", e+1, s+1, err)
			}
			mean := agree[0] / float64(g.Size())
			pos.step, pos.global = s+1, pos.global+1
			pos.lossSum += mean
			pos.lossSteps++
			if lead && cfg.OnStep != nil {
				cfg.OnStep(StepInfo{Epoch: e, Step: s + 1, StepsPerEpoch: w.steps, GlobalStep: pos.global, Loss: mean})
			}
			if agree[1] > 0 {
				stop = StopInterrupted
				break
			}
		}
		trainTime := time.Since(start)
		if stop != "" {
			path, err := w.checkpoint(pos)
			if err != nil {
				return nil, err
			}
			if path != "" {
				res.Checkpoint = path
			}
			break
		}

		evalStart := time.Now()
		correct, lossSum, count, err := w.eval.run()
		if err != nil {
			return nil, err
		}
		evalTime := time.Since(evalStart)
		sums := []float64{float64(correct), lossSum, float64(count)}
		if err := allreduce.AllReduce(w.comm, g, sums, allreduce.Sum); err != nil {
			return nil, fmt.Errorf("trainer: combining the evaluation: %w", err)
		}
		times := []float64{compute.Seconds(), commWait.Seconds(), optTime.Seconds()}
		if err := allreduce.AllReduce(w.comm, g, times, allreduce.Max); err != nil {
			return nil, fmt.Errorf("trainer: combining step times: %w", err)
		}
		m := EpochMetrics{
			Epoch: e + 1, Steps: stepsRun, GlobalStep: pos.global,
			TestCorrect: int(sums[0]), TestCount: int(sums[2]),
			EpochSeconds: trainTime.Seconds(), EvalSeconds: evalTime.Seconds(),
			ComputeSeconds: times[0], CommWaitSeconds: times[1], OptimizerSeconds: times[2],
			OptStateBytesPerRank: w.opt.StateBytes(), CommBytesPerStep: commBytes,
			Ranks: g.Size(), GlobalBatch: cfg.GlobalBatch,
		}
		if pos.lossSteps > 0 {
			m.TrainLoss = pos.lossSum / float64(pos.lossSteps)
		}
		if m.TestCount > 0 {
			m.TestAccuracy = sums[0] / sums[2]
			m.TestLoss = sums[1] / sums[2]
		}
		if trainTime > 0 {
			m.SamplesPerSec = float64(stepsRun*cfg.GlobalBatch) / trainTime.Seconds()
		}
		res.Epochs = append(res.Epochs, m)
		pos = position{epoch: e + 1, global: pos.global}
		path, err := w.checkpoint(pos)
		if err != nil {
			return nil, err
		}
		if path != "" {
			res.Checkpoint = path
		}
		if lead && cfg.OnEpoch != nil {
			cfg.OnEpoch(m)
		}
		// Rank 0 wrote the checkpoint and reported: start the next epoch
		// together, so that time does not show up as the other ranks'
		// communication wait.
		if err := allreduce.Barrier(w.comm, g); err != nil {
			return nil, fmt.Errorf("trainer: end of epoch %d: %w", e+1, err)
		}
	}
	if stop != "" {
		res.Stop = stop
	}
	res.Epoch, res.StepInEpoch, res.GlobalStep = pos.epoch, pos.step, pos.global
	arena := w.d.ParamArena()
	for i, p := range w.params {
		lo, hi := w.d.Offset(i)
		data := make([]float64, hi-lo)
		for j, x := range arena[lo:hi] {
			data[j] = float64(x)
		}
		res.Params = append(res.Params, Param{Name: p.Name(), Shape: []int(p.Shape().Clone()), Data: data})
	}
	if stop == StopInterrupted {
		return res, fmt.Errorf("trainer: interrupted after epoch %d step %d (global step %d): %w", pos.epoch+1, pos.step, pos.global, context.Cause(ctx))
	}
	return res, nil
}
