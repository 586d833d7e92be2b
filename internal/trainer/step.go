package trainer

import (
	"fmt"
	"time"

	"github.com/ringddp/ringddp/ddp"
)

// epochStats is one rank's account of the steps it ran in an epoch.
type epochStats struct {
	steps int
	wall  time.Duration // from the epoch's first step to its last
	// The step-time breakdown summed over the steps: forward and backward;
	// communication not hidden by the backward pass (the bucket wait after
	// it, and Step's own, such as ZeRO-1's all-gather); all communication,
	// hidden or not; the optimizer.
	compute, commWait, comm, optimizer time.Duration
}

// add accounts for one step: Run's statistics, then Step's time in the
// optimizer and in communication.
func (s *epochStats) add(run ddp.StepStats, opt, stepComm time.Duration) {
	s.steps++
	s.compute += run.Compute
	s.commWait += run.CommWait + stepComm
	s.comm += run.Comm + stepComm
	s.optimizer += opt
}

// trainEpoch runs epoch p.epoch's steps from p.step on, advancing p, until
// the epoch ends, MaxSteps is reached (StopMaxSteps) or the ranks agree to
// stop (StopInterrupted), writing the checkpoints CheckpointEvery asks for
// on the way.
func (w *worker[T]) trainEpoch(p *position) (epochStats, Stop, error) {
	var st epochStats
	var stop Stop
	var saving time.Duration // in periodic checkpoints, not counted as training time
	start := time.Now()
	for p.step < w.steps {
		if w.cfg.MaxSteps > 0 && p.global >= w.cfg.MaxSteps {
			stop = StopMaxSteps
			break
		}
		agreed, err := w.step(p, &st)
		if err != nil {
			return st, "", err
		}
		w.reportStep(*p, agreed.Loss)
		if agreed.Stop {
			stop = StopInterrupted
			break
		}
		if w.periodic(*p) {
			began := time.Now()
			if _, err := w.checkpoint(*p); err != nil {
				return st, "", err
			}
			saving += time.Since(began)
		}
	}
	st.wall = time.Since(start) - saving
	return st, stop, nil
}

// periodic reports whether a checkpoint is due at p by
// Config.CheckpointEvery: at a multiple of it, unless the epoch's end or
// MaxSteps, which write their own, is at p.
func (w *worker[T]) periodic(p position) bool {
	every := w.cfg.CheckpointEvery
	switch {
	case every <= 0 || p.global%every != 0 || p.step >= w.steps:
		return false
	case w.cfg.MaxSteps > 0 && p.global >= w.cfg.MaxSteps:
		return false
	}
	return true
}

// step runs the step at p: fill this rank's batch, forward and backward
// (the gradient buckets communicated on the way, the loss and the stop
// votes agreed with the last of them), the optimizer. It advances p, adds
// the step to st and returns what the ranks agreed: the step's mean loss
// and whether any rank voted to stop.
func (w *worker[T]) step(p *position, st *epochStats) (ddp.Agreement, error) {
	s := p.step
	if err := fill(w.train, w.sampler.Batch(s, w.perRank), w.x, w.y); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: %w", err)
	}
	if err := w.rep.Run(w.comm, w.vm); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: epoch %d step %d: %w", p.epoch+1, s+1, err)
	}
	began := time.Now()
	if err := w.rep.Step(w.comm); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: epoch %d step %d: %w", p.epoch+1, s+1, err)
	}
	opt := w.rep.LastOptimizerTime()
	st.add(w.d.LastStats(), opt, max(0, time.Since(began)-opt))
	agreed := w.d.Agreed()
	p.step, p.global = s+1, p.global+1
	p.lossSum += agreed.Loss
	p.lossSteps++
	return agreed, nil
}
