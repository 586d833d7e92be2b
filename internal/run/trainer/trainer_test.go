package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/models"
)

var (
	synthOnce             sync.Once
	synthTrain, synthTest *datasets.Dataset
)

// synth is a small learnable 28×28, 10-class dataset: 1000 training and
// 201 test examples (201: the test shards are uneven over 2 ranks).
func synth() (train, test *datasets.Dataset) {
	synthOnce.Do(func() {
		all := datasets.Synthetic(1201, 28, 28, 10, 3)
		synthTrain, synthTest = all.Slice(0, 1000), all.Slice(1000, 1201)
	})
	return synthTrain, synthTest
}

// small is a fast configuration: a 784-16-10 MLP on 2 ranks, 25 steps per
// epoch, evaluation in padded batches of 30.
func small() Config {
	train, test := synth()
	cfg := DefaultConfig()
	cfg.Ranks = 2
	cfg.Hidden = []int{16}
	cfg.GlobalBatch = 40
	cfg.Epochs = 2
	cfg.EvalBatch = 30
	cfg.LR = 0.05
	cfg.Train, cfg.Test = train, test
	cfg.CommTimeout = 30 * time.Second
	return cfg
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestTrainsOnSynthetic(t *testing.T) {
	cfg := small()
	var steps []StepInfo
	var epochs []EpochMetrics
	var plan Plan
	cfg.OnStart = func(p Plan) { plan = p }
	cfg.OnStep = func(s StepInfo) { steps = append(steps, s) }
	cfg.OnEpoch = func(m EpochMetrics) { epochs = append(epochs, m) }
	res, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, StopDone, res.Stop)
	require.Equal(t, 25, plan.StepsPerEpoch)
	require.Equal(t, 20, plan.PerRankBatch)
	require.Equal(t, 784*16+16+16*10+10, plan.Params)
	require.Equal(t, int64(plan.Params*4), plan.ParamBytes)
	require.Equal(t, plan.ParamBytes, plan.CommBytesPerStep, "2(N-1)/N = 1 for N = 2")
	require.Len(t, steps, 50)
	require.Equal(t, res.Epochs, epochs)
	require.Len(t, res.Epochs, 2)
	require.Equal(t, 2, res.Epoch)
	require.Equal(t, int64(50), res.GlobalStep)

	first, last := res.Epochs[0], res.Epochs[1]
	require.Less(t, last.TrainLoss, first.TrainLoss)
	require.Less(t, steps[len(steps)-1].Loss, steps[0].Loss/4)
	require.Greater(t, last.TestAccuracy, 0.9)
	for _, m := range res.Epochs {
		require.Equal(t, 201, m.TestCount, "every test example counted once")
		require.Equal(t, 25, m.Steps)
		require.Equal(t, 2, m.Ranks)
		require.Equal(t, 40, m.GlobalBatch)
		require.Greater(t, m.SamplesPerSec, 0.0)
		require.Greater(t, m.ComputeSeconds, 0.0)
		require.GreaterOrEqual(t, m.CommWaitSeconds, 0.0)
		require.Greater(t, m.OptimizerSeconds, 0.0)
		require.Greater(t, m.CommSeconds, 0.0)
		require.False(t, m.Partial)
		require.Equal(t, 25, m.StepInEpoch)
		require.Equal(t, 25, m.StepsPerEpoch)
		require.Equal(t, int64(plan.Params*4), m.OptStateBytesPerRank, "SGD momentum: one buffer")
		require.Equal(t, plan.CommBytesPerStep, m.CommBytesPerStep)
		require.InDelta(t, float64(m.TestCorrect)/201, m.TestAccuracy, 1e-12)
	}

	// The sharded, padded evaluation agrees with a plain one-graph
	// evaluation of the final parameters over the whole test set.
	correct, loss := referenceEval(t, res.Params, cfg.Test)
	require.Equal(t, correct, last.TestCorrect)
	require.InDelta(t, loss, last.TestLoss, 1e-5)
}

// referenceEval evaluates params (a 784-16-10 MLP) on the whole of test in
// one batch with models.CrossEntropy and models.CountCorrect.
func referenceEval(t *testing.T, params []Param, test *datasets.Dataset) (int, float64) {
	g := G.NewGraph()
	m, err := models.NewMLP(g, tensor.Float64, 0, 784, 16, 10)
	require.NoError(t, err)
	for i, p := range m.Learnables() {
		require.Equal(t, params[i].Shape, []int(p.Shape()))
		require.NoError(t, G.Let(p, tensor.New(tensor.WithShape(params[i].Shape...), tensor.WithBacking(params[i].Data))))
	}
	n := test.Len()
	idx := make([]int, n)
	labels := make([]uint8, n)
	for i := range idx {
		idx[i] = i
		labels[i] = uint8(test.Label(i))
	}
	x := make([]float64, n*784)
	y := make([]float64, n*10)
	require.NoError(t, test.FillBatch64(idx, x, y))
	xn := G.NewMatrix(g, tensor.Float64, G.WithShape(n, 784), G.WithValue(tensor.New(tensor.WithShape(n, 784), tensor.WithBacking(x))))
	yn := G.NewMatrix(g, tensor.Float64, G.WithShape(n, 10), G.WithValue(tensor.New(tensor.WithShape(n, 10), tensor.WithBacking(y))))
	logits, err := m.Forward(xn, m.Learnables())
	require.NoError(t, err)
	loss, err := models.CrossEntropy(logits, yn)
	require.NoError(t, err)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	correct, err := models.CountCorrect(logits.Value().(tensor.Tensor), labels)
	require.NoError(t, err)
	l, err := scalar(loss.Value())
	require.NoError(t, err)
	return correct, l
}

func equalParams(t *testing.T, want, got []Param) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i].Name, got[i].Name)
		require.Equal(t, len(want[i].Data), len(got[i].Data))
		for j := range want[i].Data {
			if math.Float64bits(want[i].Data[j]) != math.Float64bits(got[i].Data[j]) {
				t.Fatalf("parameter %d (%s) element %d: %v vs %v", i, want[i].Name, j, want[i].Data[j], got[i].Data[j])
			}
		}
	}
}

// TestResumeBitwise: a run stopped by MaxSteps mid-epoch and resumed from
// its checkpoint ends with bitwise the same parameters, metrics and final
// checkpoint file as a run that was never interrupted.
func TestResumeBitwise(t *testing.T) {
	cases := []struct {
		optim, dtype string
		stopAt       int64
	}{
		{OptimSGD, Float32, 32},   // mid epoch 2
		{OptimAdam, Float32, 13},  // mid epoch 1
		{OptimAdamW, Float64, 25}, // exactly at the end of epoch 1
	}
	for _, c := range cases {
		t.Run(c.optim+"/"+c.dtype, func(t *testing.T) {
			dir := t.TempDir()
			cfg := small()
			cfg.Optim, cfg.DType = c.optim, c.dtype
			cfg.LR, cfg.Momentum, cfg.WeightDecay = DefaultLR(c.optim, ModelMLP), DefaultMomentum(c.optim), DefaultWeightDecay(c.optim)

			full := cfg
			full.Checkpoint = filepath.Join(dir, "full.safetensors")
			want, err := Run(ctxT(t), full)
			require.NoError(t, err)

			first := cfg
			first.MaxSteps = c.stopAt
			first.Checkpoint = filepath.Join(dir, "part.safetensors")
			part, err := Run(ctxT(t), first)
			require.NoError(t, err)
			require.Equal(t, StopMaxSteps, part.Stop)
			require.Equal(t, c.stopAt, part.GlobalStep)
			info, err := ReadCheckpointInfo(first.Checkpoint)
			require.NoError(t, err)
			require.Equal(t, c.stopAt, info.GlobalStep)
			require.Equal(t, int(c.stopAt/25), info.Epoch)
			require.Equal(t, int(c.stopAt%25), info.StepInEpoch)

			second := cfg
			second.Resume = first.Checkpoint
			second.Checkpoint = filepath.Join(dir, "resumed.safetensors")
			var plan Plan
			second.OnStart = func(p Plan) { plan = p }
			got, err := Run(ctxT(t), second)
			require.NoError(t, err)
			require.True(t, plan.Resumed)
			require.Equal(t, c.stopAt, plan.GlobalStep)
			require.Equal(t, StopDone, got.Stop)
			require.Equal(t, want.GlobalStep, got.GlobalStep)
			equalParams(t, want.Params, got.Params)

			// The resumed run's epochs carry on the interrupted epoch's loss
			// (the stopped run reports its partial epoch, marked).
			var all []EpochMetrics
			for _, m := range part.Epochs {
				if !m.Partial {
					all = append(all, m)
				}
			}
			all = append(all, got.Epochs...)
			require.Len(t, all, len(want.Epochs))
			for i := range all {
				require.Equal(t, want.Epochs[i].TrainLoss, all[i].TrainLoss, "epoch %d train loss", i+1)
				require.Equal(t, want.Epochs[i].TestCorrect, all[i].TestCorrect)
				require.Equal(t, want.Epochs[i].TestLoss, all[i].TestLoss)
			}
			a, err := os.ReadFile(full.Checkpoint)
			require.NoError(t, err)
			b, err := os.ReadFile(second.Checkpoint)
			require.NoError(t, err)
			require.Equal(t, a, b, "final checkpoints are byte-identical")
		})
	}
}

// TestInterruptCheckpointsAndResumes: cancelling the context stops every
// rank after the same step, writes a checkpoint there, and resuming from it
// gives the uninterrupted result bitwise.
func TestInterruptCheckpointsAndResumes(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	want, err := Run(ctxT(t), cfg)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(ctxT(t))
	first := cfg
	first.Checkpoint = filepath.Join(dir, "int.safetensors")
	first.OnStep = func(s StepInfo) {
		if s.GlobalStep == 7 {
			cancel()
		}
	}
	part, err := Run(ctx, first)
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, part)
	require.Equal(t, StopInterrupted, part.Stop)
	require.Equal(t, first.Checkpoint, part.Checkpoint)
	// Rank 0 cancels after its step 7; a rank may already have seen it or
	// not, but all ranks stop after the same step (8 at the latest).
	require.GreaterOrEqual(t, part.GlobalStep, int64(7))
	require.LessOrEqual(t, part.GlobalStep, int64(8))

	second := cfg
	second.Resume = first.Checkpoint
	got, err := Run(ctxT(t), second)
	require.NoError(t, err)
	equalParams(t, want.Params, got.Params)
}

func TestResumeOtherWorldSize(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Optim, cfg.LR, cfg.Momentum = OptimAdam, 1e-3, 0
	cfg.MaxSteps = 30 // epoch 2 (0-based 1), step 5
	cfg.Checkpoint = filepath.Join(dir, "a.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	for _, ranks := range []int{1, 4} {
		next := cfg
		next.Ranks = ranks
		next.MaxSteps = 0
		next.Resume = cfg.Checkpoint
		next.Checkpoint = filepath.Join(dir, fmt.Sprintf("r%d.safetensors", ranks))
		var plan Plan
		next.OnStart = func(p Plan) { plan = p }
		res, err := Run(ctxT(t), next)
		require.NoError(t, err, "ranks %d", ranks)
		require.Equal(t, 1, plan.StartEpoch)
		require.Equal(t, 5, plan.StartStep)
		require.Equal(t, int64(30), plan.GlobalStep)
		require.Equal(t, ranks, plan.Ranks)
		require.Equal(t, int64(50), res.GlobalStep)
		require.Len(t, res.Epochs, 1)
		require.Equal(t, 201, res.Epochs[0].TestCount)
		require.Greater(t, res.Epochs[0].TestAccuracy, 0.8)
		info, err := ReadCheckpointInfo(next.Checkpoint)
		require.NoError(t, err)
		require.Equal(t, ranks, info.Ranks)
	}
}

func TestResumeErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	cfg.MaxSteps = 3
	cfg.Checkpoint = filepath.Join(dir, "ok.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	good, err := os.ReadFile(cfg.Checkpoint)
	require.NoError(t, err)

	resume := func(path string, edit func(*Config)) error {
		c := small()
		c.Epochs = 1
		c.Resume = path
		if edit != nil {
			edit(&c)
		}
		_, err := Run(ctxT(t), c)
		return err
	}
	mismatches := map[string]func(*Config){
		`model: checkpoint has "mlp", this run has "cnn"`:         func(c *Config) { c.Model = ModelCNN },
		`dtype: checkpoint has "float32", this run has "float64"`: func(c *Config) { c.DType = Float64 },
		"hidden: checkpoint has 16, this run has 32":              func(c *Config) { c.Hidden = []int{32} },
		"batch (global): checkpoint has 40, this run has 20":      func(c *Config) { c.GlobalBatch = 20 },
		"seed: checkpoint has 1, this run has 2":                  func(c *Config) { c.Seed = 2 },
		`optim: checkpoint has "sgd", this run has "adam"`:        func(c *Config) { c.Optim, c.Momentum = OptimAdam, 0 },
		"lr: checkpoint has 0.05, this run has 0.1":               func(c *Config) { c.LR = 0.1 },
		"momentum: checkpoint has 0.9, this run has 0.5":          func(c *Config) { c.Momentum = 0.5 },
		"weight-decay: checkpoint has 0, this run has 0.1":        func(c *Config) { c.WeightDecay = 0.1 },
	}
	for want, edit := range mismatches {
		err := resume(cfg.Checkpoint, edit)
		require.ErrorIs(t, err, ErrMismatch, want)
		require.ErrorContains(t, err, want)
	}

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	corrupt := map[string][]byte{
		"garbage":   []byte("this is not a checkpoint at all"),
		"truncated": good[:len(good)-100],
		"empty":     nil,
	}
	for name, b := range corrupt {
		err := resume(write(name, b), nil)
		require.ErrorIs(t, err, ErrCheckpoint, name)
		require.ErrorContains(t, err, "corrupt or not a safetensors file", name)
	}
	// A flipped bit in the data section, and one in a metadata value.
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1000] ^= 0x10
	err = resume(write("flipped-data", flipped), nil)
	require.ErrorIs(t, err, ErrCheckpoint)
	require.ErrorContains(t, err, "checksum mismatch: the data section")

	hdr := append([]byte(nil), good...)
	i := indexOf(hdr, []byte(`"step_in_epoch":"3"`))
	require.Positive(t, i)
	hdr[i+len(`"step_in_epoch":"`)] = '9'
	err = resume(write("flipped-header", hdr), nil)
	require.ErrorIs(t, err, ErrCheckpoint)
	require.ErrorContains(t, err, "checksum mismatch: the header")

	_, err = Run(ctxT(t), func() Config { c := small(); c.Resume = filepath.Join(dir, "missing"); return c }())
	require.ErrorIs(t, err, os.ErrNotExist)
}

func indexOf(b, sub []byte) int {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return i
		}
	}
	return -1
}

func TestCNNSmoke(t *testing.T) {
	train, test := synth()
	cfg := small()
	cfg.Model = ModelCNN
	cfg.Hidden = nil
	cfg.GlobalBatch = 8
	cfg.Epochs = 1
	cfg.EvalBatch = 7
	cfg.Train, cfg.Test = train.Slice(0, 64), test.Slice(0, 23)
	res, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Len(t, res.Epochs, 1)
	require.Equal(t, 23, res.Epochs[0].TestCount)
	require.Equal(t, 8, res.Epochs[0].Steps)
}

// TestEvalLeavesArenaAlone: the evaluation graph reads the ddp arena
// through views; running it must not write to it (for both models).
func TestEvalLeavesArenaAlone(t *testing.T) {
	for _, model := range []string{ModelMLP, ModelCNN} {
		t.Run(model, func(t *testing.T) {
			cfg := small()
			cfg.Model = model
			cfg.Ranks = 1
			cfg.GlobalBatch = 4
			cfg.MaxSteps = 2
			cfg.Epochs = 1
			train, test := synth()
			cfg.Train, cfg.Test = train.Slice(0, 16), test.Slice(0, 10)
			conns, err := connect(context.Background(), cfg)
			require.NoError(t, err)
			errs := make(chan error, 1)
			go func() {
				g, err := allreduce.NewGroup(conns[0])
				if err != nil {
					errs <- err
					return
				}
				defer g.Close()
				w, err := newWorker[float32](context.Background(), cfg, g, cfg.Train, cfg.Test, rankEnv{})
				if err != nil {
					errs <- err
					return
				}
				defer w.close()
				before := append([]float32(nil), w.d.ParamArena()...)
				c1, l1, n1, err := w.eval.run()
				if err != nil {
					errs <- err
					return
				}
				c2, l2, n2, err := w.eval.run()
				if err != nil {
					errs <- err
					return
				}
				if n1 != 10 || n2 != 10 || c1 != c2 || l1 != l2 {
					errs <- fmt.Errorf("evaluation not repeatable: %d %v %d / %d %v %d", c1, l1, n1, c2, l2, n2)
					return
				}
				for i, v := range w.d.ParamArena() {
					if math.Float32bits(v) != math.Float32bits(before[i]) {
						errs <- fmt.Errorf("arena element %d changed by evaluation", i)
						return
					}
				}
				// A change in the arena is seen by the evaluation.
				for i := range w.d.ParamArena() {
					w.d.ParamArena()[i] = 0
				}
				_, l3, _, err := w.eval.run()
				if err == nil && math.Abs(l3-10*math.Log(10)) > 1e-4 {
					err = fmt.Errorf("zero parameters give loss sum %v, want 10·ln 10", l3)
				}
				errs <- err
			}()
			require.NoError(t, <-errs)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	cases := map[string]func(*Config){
		"ranks = 0":                           func(c *Config) { c.Ranks = 0 },
		`model = "rnn"`:                       func(c *Config) { c.Model = "rnn" },
		`dtype = "float16"`:                   func(c *Config) { c.DType = "float16" },
		"epochs = 0":                          func(c *Config) { c.Epochs = 0 },
		"batch = 0":                           func(c *Config) { c.GlobalBatch = 0 },
		"batch = 1 is smaller than ranks = 2": func(c *Config) { c.GlobalBatch = 1 },
		"eval-batch = 0":                      func(c *Config) { c.EvalBatch = 0 },
		`optim = "lbfgs"`:                     func(c *Config) { c.Optim = "lbfgs" },
		"lr = 0,":                             func(c *Config) { c.LR = 0 },
		"lr = NaN":                            func(c *Config) { c.LR = math.NaN() },
		"momentum = -1":                       func(c *Config) { c.Momentum = -1 },
		"momentum = 0.9 is only for sgd":      func(c *Config) { c.Optim = OptimAdam },
		"weight-decay = -0.1":                 func(c *Config) { c.WeightDecay = -0.1 },
		"bucket-mb = 0":                       func(c *Config) { c.BucketMB = 0 },
		"max-steps = -1":                      func(c *Config) { c.MaxSteps = -1 },
		"hidden[0] = 0":                       func(c *Config) { c.Hidden = []int{0} },
		"Train and Test":                      func(c *Config) { c.Test = nil },
	}
	for want, edit := range cases {
		c := small()
		edit(&c)
		_, err := Run(context.Background(), c)
		require.ErrorContains(t, err, want)
	}
	c := small()
	c.GlobalBatch = 1200
	_, err := Run(context.Background(), c)
	require.ErrorContains(t, err, "no full step per epoch")
	c = small()
	c.Model = ModelCNN
	c.Train = datasets.Synthetic(10, 5, 5, 10, 1)
	c.Test = datasets.Synthetic(10, 5, 5, 10, 2)
	_, err = Run(context.Background(), c)
	require.ErrorContains(t, err, "needs 28×28 images")
}

func TestCommBytesPerStep(t *testing.T) {
	require.Equal(t, int64(0), CommBytesPerStep(1000, 1))
	require.Equal(t, int64(1000), CommBytesPerStep(1000, 2))
	require.Equal(t, int64(1500), CommBytesPerStep(1000, 4))
	require.Equal(t, int64(1750), CommBytesPerStep(1000, 8))
}

// TestRankFailureDoesNotHang: a rank that cannot write its checkpoint
// fails the run promptly on every rank.
func TestRankFailureDoesNotHang(t *testing.T) {
	cfg := small()
	cfg.Checkpoint = filepath.Join(t.TempDir(), "no", "such", "dir", "x.safetensors")
	start := time.Now()
	_, err := Run(ctxT(t), cfg)
	require.Error(t, err)
	require.ErrorContains(t, err, "rank 0")
	require.ErrorContains(t, err, "writing checkpoint")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
	require.Less(t, time.Since(start), 20*time.Second)
}

func maxParamDiff(want, got []Param) float64 {
	worst := 0.0
	for i := range want {
		for j := range want[i].Data {
			worst = math.Max(worst, math.Abs(want[i].Data[j]-got[i].Data[j]))
		}
	}
	return worst
}

// scalar reads a scalar node value.
func scalar(v G.Value) (float64, error) {
	switch x := v.(type) {
	case *G.F32:
		return float64(*x), nil
	case *G.F64:
		return float64(*x), nil
	case tensor.Tensor:
		switch d := x.Data().(type) {
		case float32:
			return float64(d), nil
		case float64:
			return d, nil
		}
	}
	return 0, fmt.Errorf("value %T is not a float scalar", v)
}
