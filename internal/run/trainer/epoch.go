package trainer

import (
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/trace"
)

// figures is what one rank contributes to an epoch's metrics: its test
// shard's evaluation and its step-time breakdown in seconds, both summed
// over ranks (the metrics divide the times by the ranks: their mean).
type figures struct {
	correct, lossSum, count              float64
	compute, commWait, hidden, optimizer float64
}

const figureCount = 7

func (f figures) values() [figureCount]float64 {
	return [figureCount]float64{f.correct, f.lossSum, f.count, f.compute, f.commWait, f.hidden, f.optimizer}
}

// combineFigures sums every rank's figures (rank order, so every rank gets
// the same).
func combineFigures(all []float64) figures {
	var c figures
	for r := 0; r+figureCount <= len(all); r += figureCount {
		v := all[r : r+figureCount]
		c.correct += v[0]
		c.lossSum += v[1]
		c.count += v[2]
		c.compute += v[3]
		c.commWait += v[4]
		c.hidden += v[5]
		c.optimizer += v[6]
	}
	return c
}

// endEpoch closes epoch p.epoch, whose steps st describes: finished, or
// stopped by MaxSteps inside it (partial). It evaluates this rank's test
// shard, writes the checkpoint at resumeAt, and combines every rank's
// figures with one all-gather, which also holds the other ranks until rank
// 0 has written the checkpoint. It returns the epoch's metrics and the
// checkpoint written ("" none).
func (w *worker[T]) endEpoch(p, resumeAt position, st epochStats, partial bool) (EpochMetrics, string, error) {
	evalStart := time.Now()
	correct, lossSum, count, err := w.eval.run()
	if err != nil {
		return EpochMetrics{}, "", err
	}
	evalTime := time.Since(evalStart)
	w.rec.BeginAt(trace.Compute, "eval", "evaluation", evalStart).Int("epoch", int64(p.epoch+1)).End()
	path, err := w.checkpoint(resumeAt)
	if err != nil {
		return EpochMetrics{}, "", err
	}
	mine := figures{
		correct: float64(correct), lossSum: lossSum, count: float64(count),
		compute: st.compute.Seconds(), commWait: st.commWait.Seconds(), hidden: st.hidden.Seconds(), optimizer: st.optimizer.Seconds(),
	}.values()
	all := make([]float64, figureCount*w.g.Size())
	sp := w.rec.Begin(trace.Comm, "collective", "epoch figures").Str("collective", "allgather").Int("bytes", int64(8*len(all)))
	err = allreduce.AllGather(w.comm, w.g, all, mine[:])
	sp.End()
	if err != nil {
		return EpochMetrics{}, "", fmt.Errorf("trainer: combining epoch %d's figures: %w", p.epoch+1, err)
	}
	return w.epochMetrics(p, st, combineFigures(all), evalTime, partial), path, nil
}
