package trainer

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/datasets"
)

// rankLoop is one rank's run: its worker (rebuilt when survivors continue
// after a failure, survive.go), where training stands, the epoch's step
// statistics and example usage, and the result so far.
type rankLoop[T Float] struct {
	ctx         context.Context
	cfg         Config
	train, test *datasets.Dataset
	env         rankEnv

	w       *worker[T]
	pos     position
	st      epochStats
	uses    usage // the epoch's example usage (usage.go)
	stEpoch int   // the epoch st and uses belong to
	res     *Result
	unwatch func() // stops Config.Survive's watch of the group
}

// runRank trains on one rank: it resumes from ck (if any), then runs epoch
// after epoch of steps (trainEpoch), each closed by endEpoch and reported,
// until the last epoch, MaxSteps (its partial epoch closed and reported
// too) or an agreed stop (a checkpoint, no report). With Config.Survive a
// failure of the group is survived (survive.go) and the loop goes on from
// where the survivors stand.
func runRank[T Float](ctx context.Context, cfg Config, g *allreduce.Group, train, test *datasets.Dataset, ck *checkpoint, env rankEnv) (*Result, error) {
	w, err := newWorker[T](ctx, cfg, g, train, test, env)
	if err != nil {
		return nil, err
	}
	l := &rankLoop[T]{ctx: ctx, cfg: cfg, train: train, test: test, env: env, w: w, res: &Result{Stop: StopDone}, unwatch: func() {}}
	defer func() { l.unwatch(); l.w.close() }()
	if ck != nil {
		if l.pos, err = w.resume(ck); err != nil {
			return nil, err
		}
	}
	l.stEpoch = l.pos.epoch
	l.uses = newUsage(train.Len())
	if joining(cfg) { // a rank started to join a running job: healed from its members
		if err := l.joinHeal(); err != nil {
			return nil, err
		}
	}
	w.reportStart(w.plan(l.pos, ck != nil))
	if cfg.Survive != nil {
		l.unwatch = cfg.Survive.Watch(g.Abort)
	}
	for {
		done, err := l.epoch()
		if err != nil {
			if !l.survivable(err) {
				return nil, err
			}
			if err := l.survive(err); err != nil {
				return nil, err
			}
			continue
		}
		if done {
			break
		}
	}
	pos, res := l.pos, l.res
	res.Epoch, res.StepInEpoch, res.GlobalStep = pos.epoch, pos.step, pos.global
	res.Params = l.w.finalParams()
	res.Rank = l.w.g.Rank()
	if res.Stop == StopInterrupted {
		return res, fmt.Errorf("trainer: interrupted after epoch %d step %d (global step %d): %w", pos.epoch+1, pos.step, pos.global, context.Cause(ctx))
	}
	return res, nil
}

// epoch runs the rest of the epoch at l.pos and closes it; done when the
// run is over.
func (l *rankLoop[T]) epoch() (done bool, err error) {
	w, cfg, res := l.w, l.cfg, l.res
	if l.pos.epoch >= cfg.Epochs {
		return true, nil
	}
	if l.pos.epoch != l.stEpoch {
		l.st, l.stEpoch = epochStats{}, l.pos.epoch
		l.uses.reset()
	}
	w.sampler.SetEpoch(l.pos.epoch)
	w.whole.SetEpoch(l.pos.epoch)
	stop, err := w.trainEpoch(&l.pos, &l.st, &l.uses)
	if err != nil {
		return false, err
	}
	if stop == StopInterrupted || (stop == StopMaxSteps && l.st.steps == 0) {
		path, err := w.checkpoint(l.pos)
		if err != nil {
			return false, err
		}
		if path != "" {
			res.Checkpoint = path
		}
		res.Stop = stop
		return true, nil
	}
	resumeAt := l.pos
	if stop == "" {
		resumeAt = l.pos.next()
	}
	m, path, err := w.endEpoch(l.pos, resumeAt, l.st, stop != "")
	if err != nil {
		return false, err
	}
	m.SamplesUsed, m.SamplesDistinct = l.uses.used, l.uses.distinct
	if path != "" {
		res.Checkpoint = path
	}
	if n := len(res.Epochs); n == 0 || res.Epochs[n-1].Epoch != m.Epoch { // an epoch end redone after a failure is reported once
		res.Epochs = append(res.Epochs, m)
		w.reportEpoch(m)
	}
	l.pos = resumeAt
	if stop != "" {
		res.Stop = stop
		return true, nil
	}
	return false, nil
}
