package trainer

import (
	"fmt"

	"github.com/ringddp/ringddp/internal/trace"
)

// position is where training stands.
type position struct {
	epoch, step int // 0-based epoch in progress; steps of it done
	global      int64
	lossSum     float64 // the epoch's train-loss sum so far
	lossSteps   int
}

// next is the start of the following epoch.
func (p position) next() position { return position{epoch: p.epoch + 1, global: p.global} }

func (w *worker[T]) info(p position) CheckpointInfo {
	cfg := w.cfg
	return CheckpointInfo{
		Model: cfg.Model, DType: cfg.DType, Hidden: cfg.hidden(), GlobalBatch: cfg.GlobalBatch,
		Ranks: w.g.Size(), Seed: cfg.Seed, Zero1: cfg.Zero1, JobID: cfg.JobID,
		Epoch: p.epoch, StepInEpoch: p.step, GlobalStep: p.global, StepsPerEpoch: w.steps,
		EpochLossSum: p.lossSum, EpochLossSteps: p.lossSteps,
	}
}

// checkpoint writes a checkpoint at p from rank 0 (the optimizer state
// gathered to it alone), into the series of Config.Checkpoint (series.go);
// it returns the path written ("" when none). Every rank calls it.
func (w *worker[T]) checkpoint(p position) (string, error) {
	if w.cfg.Checkpoint == "" {
		return "", nil
	}
	defer w.rec.Begin(trace.Compute, "checkpoint", "checkpoint").Int("global_step", p.global).End()
	st, err := w.rep.GatherOptimizerState(w.comm, 0)
	if err != nil {
		return "", fmt.Errorf("trainer: gathering the optimizer state: %w", err)
	}
	hook, err := gatherHookState(w.comm, w.g, w.d, 0)
	if err != nil {
		return "", err
	}
	if w.g.Rank() != 0 {
		return "", nil
	}
	info := w.info(p)
	stamped, err := saveCheckpoint(w.cfg.Checkpoint, w.cfg.CheckpointKeep, p.global, func(path string) error {
		return writeCheckpoint(path, info, w.params, w.d, st, hook)
	})
	if err != nil {
		return "", fmt.Errorf("trainer: writing checkpoint: %w", err)
	}
	if w.cfg.OnCheckpoint != nil {
		w.cfg.OnCheckpoint(Checkpointed{Path: w.cfg.Checkpoint, Stamped: stamped, Info: info})
	}
	return w.cfg.Checkpoint, nil
}

// resume loads ck's parameters and optimizer state and returns the
// position to continue from: ck's, or the next epoch's start when ck's
// step is past this world size's epoch end.
func (w *worker[T]) resume(ck *checkpoint) (position, error) {
	if err := restoreCheckpoint(ck, w.params, w.d, w.rep.LoadFullOptimizerState); err != nil {
		return position{}, err
	}
	if err := restoreHook(ck, w.g, w.d); err != nil {
		return position{}, err
	}
	p := position{epoch: ck.Epoch, step: ck.StepInEpoch, global: ck.GlobalStep,
		lossSum: ck.EpochLossSum, lossSteps: ck.EpochLossSteps}
	if p.step >= w.steps { // a different world size: fewer steps per epoch
		p = p.next()
	}
	return p, nil
}
