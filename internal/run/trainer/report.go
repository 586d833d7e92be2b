package trainer

import (
	"time"
	"unsafe"
)

// plan describes the run starting at p (OnStart).
func (w *worker[T]) plan(p position, resumed bool) Plan {
	cfg := w.cfg
	paramCount := len(w.d.ParamArena())
	paramBytes := int64(paramCount) * int64(unsafe.Sizeof(T(0)))
	return Plan{
		Model: cfg.Model, DType: cfg.DType, Optim: cfg.Optim, Ranks: w.g.Size(),
		GlobalBatch: cfg.GlobalBatch, PerRankBatch: w.perRank, StepsPerEpoch: w.steps, Epochs: cfg.Epochs,
		TrainExamples: w.train.Len(), TestExamples: w.test.Len(),
		Params: paramCount, ParamBytes: paramBytes, Buckets: len(w.d.BucketRanges()),
		CommBytesPerStep: CommBytesPerStep(paramBytes, w.g.Size()),
		LR:               cfg.LR, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay,
		Resumed: resumed, StartEpoch: p.epoch, StartStep: p.step, GlobalStep: p.global,
	}
}

// epochMetrics are the metrics of epoch p.epoch at p: this rank's wall
// times and the figures combined over ranks.
func (w *worker[T]) epochMetrics(p position, st epochStats, f figures, evalTime time.Duration, partial bool) EpochMetrics {
	cfg := w.cfg
	paramBytes := int64(len(w.d.ParamArena())) * int64(unsafe.Sizeof(T(0)))
	m := EpochMetrics{
		Epoch: p.epoch + 1, Partial: partial, Steps: st.steps, StepInEpoch: p.step, StepsPerEpoch: w.steps,
		GlobalStep:  p.global,
		TestCorrect: int(f.correct), TestCount: int(f.count),
		EpochSeconds: st.wall.Seconds(), EvalSeconds: evalTime.Seconds(),
		OptStateBytesPerRank: w.rep.StateBytes(), CommBytesPerStep: CommBytesPerStep(paramBytes, w.g.Size()),
		Ranks: w.g.Size(), GlobalBatch: cfg.GlobalBatch,
	}
	if n := float64(w.g.Size()); n > 0 { // the mean over ranks
		m.ComputeSeconds, m.CommWaitSeconds, m.OptimizerSeconds = f.compute/n, f.commWait/n, f.optimizer/n
		m.CommHiddenSeconds = f.hidden / n
		m.CommSeconds = m.CommHiddenSeconds + m.CommWaitSeconds
	}
	if p.lossSteps > 0 {
		m.TrainLoss = p.lossSum / float64(p.lossSteps)
	}
	if m.TestCount > 0 {
		m.TestAccuracy = f.correct / f.count
		m.TestLoss = f.lossSum / f.count
	}
	m.SlowestRank, m.SlowestRankShare, m.SlowestRankLagMs = -1, 0, 0
	if r, share, lag := st.slow.significant(); r >= 0 {
		m.SlowestRank, m.SlowestRankShare, m.SlowestRankLagMs = r, share, float64(lag)/1e6
	}
	if st.wall > 0 {
		m.SamplesPerSec = float64(st.steps*cfg.GlobalBatch) / st.wall.Seconds()
	}
	return m
}

// The callbacks run on rank 0 only, but for OnRankStep.

func (w *worker[T]) reportStart(p Plan) {
	if w.g.Rank() == 0 && w.cfg.OnStart != nil {
		w.cfg.OnStart(p)
	}
}

// reportStep reports the step that brought training to p, whose loss
// averaged over ranks was loss: OnRankStep on every rank, OnStep on rank 0.
func (w *worker[T]) reportStep(p position, loss float64) {
	s := StepInfo{Epoch: p.epoch, Step: p.step, StepsPerEpoch: w.steps, GlobalStep: p.global, Loss: loss}
	if w.cfg.OnRankStep != nil {
		w.cfg.OnRankStep(w.g.Rank(), s)
	}
	if w.g.Rank() == 0 && w.cfg.OnStep != nil {
		w.cfg.OnStep(s)
	}
}

func (w *worker[T]) reportEpoch(m EpochMetrics) {
	if w.g.Rank() == 0 && w.cfg.OnEpoch != nil {
		w.cfg.OnEpoch(m)
	}
}

// finalParams copies the parameters out of the arena, creation order.
func (w *worker[T]) finalParams() []Param {
	arena := w.d.ParamArena()
	out := make([]Param, 0, len(w.params))
	for i, p := range w.params {
		lo, hi := w.d.Offset(i)
		data := make([]float64, hi-lo)
		for j, x := range arena[lo:hi] {
			data[j] = float64(x)
		}
		out = append(out, Param{Name: p.Name(), Shape: []int(p.Shape().Clone()), Data: data})
	}
	return out
}
