package trainer

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/datasets"
)

// runRank trains on one rank: it resumes from ck (if any), then runs epoch
// after epoch of steps (trainEpoch), each closed by endEpoch and reported,
// until the last epoch, MaxSteps (its partial epoch closed and reported
// too) or an agreed stop (a checkpoint, no report).
func runRank[T Float](ctx context.Context, cfg Config, g *allreduce.Group, train, test *datasets.Dataset, ck *checkpoint, env rankEnv) (*Result, error) {
	w, err := newWorker[T](ctx, cfg, g, train, test, env)
	if err != nil {
		return nil, err
	}
	defer w.close()
	var pos position
	if ck != nil {
		if pos, err = w.resume(ck); err != nil {
			return nil, err
		}
	}
	w.reportStart(w.plan(pos, ck != nil))

	res := &Result{Stop: StopDone}
	for pos.epoch < cfg.Epochs {
		w.sampler.SetEpoch(pos.epoch)
		st, stop, err := w.trainEpoch(&pos)
		if err != nil {
			return nil, err
		}
		if stop == StopInterrupted || (stop == StopMaxSteps && st.steps == 0) {
			path, err := w.checkpoint(pos)
			if err != nil {
				return nil, err
			}
			if path != "" {
				res.Checkpoint = path
			}
			res.Stop = stop
			break
		}
		resumeAt := pos
		if stop == "" {
			resumeAt = pos.next()
		}
		m, path, err := w.endEpoch(pos, resumeAt, st, stop != "")
		if err != nil {
			return nil, err
		}
		res.Epochs = append(res.Epochs, m)
		if path != "" {
			res.Checkpoint = path
		}
		w.reportEpoch(m)
		pos = resumeAt
		if stop != "" {
			res.Stop = stop
			break
		}
	}
	res.Epoch, res.StepInEpoch, res.GlobalStep = pos.epoch, pos.step, pos.global
	res.Params = w.finalParams()
	if res.Stop == StopInterrupted {
		return res, fmt.Errorf("trainer: interrupted after epoch %d step %d (global step %d): %w", pos.epoch+1, pos.step, pos.global, context.Cause(ctx))
	}
	return res, nil
}
