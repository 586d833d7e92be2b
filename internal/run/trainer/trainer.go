// Package trainer is the data-parallel training loop behind cmd/train,
// usable (and tested) without the command line.
//
// Run trains a models.MLP or models.LeNet on an MNIST-style dataset over
// Config.Ranks ranks. Each rank is a goroutine with its own gorgonia graph
// (built under graphlock), its own model replica initialised from
// the same seed (ddp.Wrap broadcasts rank 0's values anyway), its own
// optimizer, and its own seeded datasets.DistributedSampler with drop-last:
// graphs have static shapes, so every step every rank takes exactly
// its share of GlobalBatch (split.go), filled into input buffers allocated
// once.
//
// The loop does not know whether it runs DDP or ZeRO-1: both are a
// replica (replica.go), the interface of what it needs. A rank's run
// (runRank, loop.go) is epochs of steps (step.go), each epoch closed by
// endEpoch (epoch.go) and reported (report.go).
//
// A step is: fill the batch, Run (forward and backward, gradient buckets
// communicated while the backward pass runs), Step (the optimizer; ZeRO-1
// also all-gathers the parameters). The step's loss and a stop vote (is
// the context cancelled?) ride with the last gradient bucket's collective
// (ddp.WithAgreement), so that every rank reports the same mean loss and
// all ranks agree on the step to stop after, with no synchronisation of
// their own.
//
// After each epoch the test set is evaluated sharded over the ranks (rank r
// takes the contiguous chunk allreduce.ChunkBounds(len, N, r)) with a
// forward-only graph per rank whose parameters are views of the ddp
// parameter arena, so it always sees the current values without copying.
// The evaluation graph has a fixed batch (EvalBatch); the last batch of a
// shard is padded and only its real rows are counted, so every test
// example is counted exactly once. Then rank 0 writes the checkpoint, and
// one all-gather of every rank's figures (correct counts and loss sums,
// summed; step-time breakdowns, of which the metrics take the maximum)
// ends the epoch. A run stopped by MaxSteps closes its partial epoch the
// same way and reports it marked Partial.
//
// Checkpoints (see checkpoint.go for the layout) are written by rank 0,
// atomically, in safetensors, after every epoch, every CheckpointEvery
// steps and when a run stops early (MaxSteps or cancellation); the
// optimizer state over the whole arena is gathered to rank 0 alone
// (position.go). With CheckpointKeep the last checkpoints are also kept
// under step-stamped names (series.go), and NewestCheckpoint finds the
// newest one whose checksums verify, skipping a torn one. Resuming
// validates the file (checksums, format) and the run (model, dtype, hidden
// widths, global batch, seed, optimizer and its hyper-parameters; a
// mismatch names the field), loads the parameters into every rank's arena
// and the optimizer state into every rank's replica (ZeRO-1: each its
// shard), and continues at the exact sampler position: the same epoch and
// the same next batch. With the same number of ranks a run stopped (by
// MaxSteps, cancellation or a crash after a checkpoint) and resumed ends
// with bitwise the same parameters as one that was never interrupted.
//
// Resuming with a different number of ranks, or under the other of DDP and
// ZeRO-1, is allowed: the checkpoint's optimizer state covers the whole
// arena and does not depend on the world size, and neither does the data
// order. The sampler deals the epoch's permutation round-robin (rank r
// takes positions r, r+N, ...), so the global batch of step s is
// positions [s·B, (s+1)·B) of the permutation for a global batch B on any
// number of ranks N, and an epoch has ⌊len/B⌋ steps on any N: the resumed
// run trains on the same batches in the same order, split differently
// among its ranks, and differs from the original only by the order in
// which the per-rank gradients are summed (float rounding).
package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/internal/run/rankrun"
	"github.com/ringddp/ringddp/internal/trace"
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
	// Before any group uses the endpoints: ranks in other processes put
	// their straggler stamps and timelines on rank 0's clock.
	clk := clocks{offset: make([]time.Duration, len(conns))}
	if !joining(cfg) { // a joining rank's group is running already: its clock stays its own
		clk, err = syncClocks(ctx, conns)
	}
	if err != nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return nil, err
	}
	if cfg.DType == Float64 {
		return runRanks[float64](ctx, cfg, train, test, ck, conns, clk)
	}
	return runRanks[float32](ctx, cfg, train, test, ck, conns, clk)
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
func runRanks[T Float](ctx context.Context, cfg Config, train, test *datasets.Dataset, ck *checkpoint, conns []transport.Conn, clk clocks) (*Result, error) {
	groups := make([]*allreduce.Group, len(conns))
	for i, c := range conns {
		g, err := allreduce.NewGroup(c, cfg.GroupOptions...)
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
	recs := make([]*trace.Recorder, len(conns))
	if cfg.Trace != "" {
		for i, g := range groups {
			recs[i] = trace.NewRecorder(g.Rank())
			recs[i].SetOffset(clk.offset[i])
		}
	}
	errs := rankrun.RunGroups(groups, func(i int, g *allreduce.Group) (err error) {
		results[i], err = runRank[T](ctx, cfg, g, train, test, ck, rankEnv{rec: recs[i], offset: clk.offset[i]})
		return err
	})
	for _, g := range groups {
		_ = g.Close()
	}
	lead := 0
	ranks := make([]int, len(groups))
	for i, g := range groups {
		if g.Rank() == 0 {
			lead = i
		}
		ranks[i] = g.Rank()
	}
	err := rankrun.Err(groups, errs)
	if cfg.Trace != "" {
		// Written on failure too: the timeline shows where a rank stopped.
		path := traceFile(cfg.Trace, ranks, conns[0].Size())
		if werr := trace.WriteFile(path, recs...); werr != nil && err == nil {
			err = fmt.Errorf("trainer: %w", werr)
		}
	}
	return results[lead], err
}
