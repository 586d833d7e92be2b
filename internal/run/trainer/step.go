package trainer

import (
	"fmt"
	"time"

	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/trace"
)

// epochStats is one rank's account of the steps it ran in an epoch.
type epochStats struct {
	steps int
	wall  time.Duration // from the epoch's first step to its last
	// The step-time breakdown summed over the steps (EpochMetrics defines
	// each): compute, comm wait, hidden communication, optimizer.
	compute, commWait, hidden, optimizer time.Duration
	slow                                 stragglers
}

// add accounts for one step: Run's statistics and how much of its bucket
// collectives ran inside its forward and backward pass (hidden), then
// Step's time in the optimizer and in communication.
func (s *epochStats) add(run ddp.StepStats, hidden, opt, stepComm time.Duration) {
	s.steps++
	s.compute += run.Compute
	s.commWait += run.CommWait + stepComm
	s.hidden += hidden
	s.optimizer += opt
}

// trainEpoch runs epoch p.epoch's steps from p.step on, advancing p, until
// the epoch ends, MaxSteps is reached (StopMaxSteps) or the ranks agree to
// stop (StopInterrupted), writing the checkpoints CheckpointEvery asks for
// on the way.
func (w *worker[T]) trainEpoch(p *position, st *epochStats, uses *usage) (Stop, error) {
	var stop Stop
	var saving time.Duration // in periodic checkpoints, not counted as training time
	start := time.Now()
	join, err := w.newJoiner()
	if err != nil {
		return "", err
	}
	for p.step < w.epochSteps() {
		if w.cfg.MaxSteps > 0 && p.global >= w.cfg.MaxSteps {
			stop = StopMaxSteps
			break
		}
		agreed, err := w.step(p, st, uses, join)
		if err != nil {
			return "", err
		}
		w.reportStep(*p, agreed.Loss)
		if agreed.Stop {
			stop = StopInterrupted
			break
		}
		if w.periodic(*p) {
			began := time.Now()
			if _, err := w.checkpoint(*p); err != nil {
				return "", err
			}
			saving += time.Since(began)
		}
	}
	if join != nil {
		agreedStop, err := w.finishJoin(join, p)
		if err != nil {
			return "", err
		}
		if agreedStop && stop == "" {
			stop = StopInterrupted // the others stopped while this rank had joined
		}
	}
	st.wall += time.Since(start) - saving
	return stop, nil
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
// and whether any rank voted to stop. The step's global batch is counted
// in uses once the step is done. join, when not nil, runs the step under
// Join (uneven inputs).
func (w *worker[T]) step(p *position, st *epochStats, uses *usage, join *ddp.Joiner[T]) (ddp.Agreement, error) {
	s := p.step
	stepStart := time.Now()
	global := w.whole.Batch(s, w.cfg.GlobalBatch)
	mine := w.batch(s, global)
	if err := checkSlice(mine, global, w.g.Rank(), w.g.Size()); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: epoch %d step %d: %w", p.epoch+1, s+1, err)
	}
	if err := fill(w.train, mine, w.x, w.y); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: %w", err)
	}
	runStep := w.rep.Run
	if join != nil {
		runStep = join.Run // uneven inputs: the count of active ranks first
	}
	vm, err := w.vms.forStep(p.global, w.g.Rank())
	if err == nil {
		err = unusedHint(runStep(w.comm, vm))
	}
	if err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: epoch %d step %d: %w", p.epoch+1, s+1, err)
	}
	began := time.Now()
	if err := w.rep.Step(w.comm); err != nil {
		return ddp.Agreement{}, fmt.Errorf("trainer: epoch %d step %d: %w", p.epoch+1, s+1, err)
	}
	ended := time.Now()
	opt := w.rep.LastOptimizerTime()
	run := w.d.LastStats()
	hidden := w.spans.hidden(run.Start, run.Start.Add(run.Compute))
	st.add(run, hidden, opt, max(0, ended.Sub(began)-opt))
	agreed := w.d.Agreed()
	st.slow.add(agreed, w.g.Size())
	if w.rec != nil {
		w.traceStep(*p, stepStart, began, ended, run, opt, agreed)
	}
	uses.add(global)
	p.step, p.global = s+1, p.global+1
	p.lossSum += agreed.Loss
	p.lossSteps++
	return agreed, nil
}

// traceStep puts the step at p (before it advanced) on the timeline: the
// step from stepStart to ended, inside it forward, backward, the wait for
// the buckets after the backward pass and the optimizer (Step began at
// began; its time beyond the optimizer is ZeRO-1's all-gather, recorded by
// the observer).
func (w *worker[T]) traceStep(p position, stepStart, began, ended time.Time, run ddp.StepStats, opt time.Duration, a ddp.Agreement) {
	r := w.rec
	sp := r.BeginAt(trace.Compute, "step", "step", stepStart).Int("step", p.global+1).With(trace.Float("loss", a.Loss))
	if a.Stamped {
		sp = sp.Int("last_rank", int64(a.Last)).With(trace.Float("last_rank_lag_ms", float64(a.Lag)/1e6))
	}
	sp.EndAt(ended)
	fwdEnd := run.Start.Add(run.Forward)
	computed := run.Start.Add(run.Compute)
	r.BeginAt(trace.Compute, "step", "forward", run.Start).EndAt(fwdEnd)
	r.BeginAt(trace.Compute, "step", "backward", fwdEnd).Int("buckets", int64(run.Buckets)).EndAt(computed)
	if run.CommWait > 0 {
		r.BeginAt(trace.Compute, "step", "wait for buckets", computed).EndAt(computed.Add(run.CommWait))
	}
	r.BeginAt(trace.Compute, "step", "optimizer", began).EndAt(began.Add(opt))
}
