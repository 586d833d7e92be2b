package trainer

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/zero"
)

// Uneven inputs (Config.UnevenBatches, cmd/train -uneven-batches): the last
// rank runs UnevenBatches fewer steps per epoch than the others, as if its
// shard of the data were shorter, and joins (ddp.Joiner, PyTorch's Join):
// it shadows the others' steps with zero gradients until the epoch's last
// step, the gradient divided by the world size (PyTorch's default). At the
// epoch's end every rank takes the parameters of a rank that ran every step
// (ddp.Joiner.Finish) and, beyond PyTorch, its optimizer state too, so the
// replicas stay identical (the short rank's own state missed the steps it
// shadowed). Under ZeRO-1 the joined rank reduce-scatters zeros, updates
// its own shard and takes part in the all-gather at every shadowed step
// (zero.ZeRO1.Join, PyTorch's ZeRO join hook), so every shard is current
// and nothing is broadcast at the end but the parameters.

// epochSteps is the number of steps this rank runs itself in an epoch.
func (w *worker[T]) epochSteps() int {
	if w.cfg.UnevenBatches > 0 && w.g.Rank() == w.g.Size()-1 {
		return w.steps - w.cfg.UnevenBatches
	}
	return w.steps
}

// newJoiner starts an epoch's Join (nil without UnevenBatches).
func (w *worker[T]) newJoiner() (*ddp.Joiner[T], error) {
	if w.cfg.UnevenBatches == 0 {
		return nil, nil
	}
	if w.cfg.UnevenBatches >= w.steps {
		return nil, fmt.Errorf("trainer: uneven-batches = %d, want fewer than the %d steps per epoch", w.cfg.UnevenBatches, w.steps)
	}
	var j *ddp.Joiner[T]
	var err error
	if z, ok := w.rep.(*zero.ZeRO1[T]); ok {
		j, err = z.Join()
	} else {
		j, err = w.d.Join(ddp.JoinOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return j, nil
}

// finishJoin ends the epoch's Join after this rank's last step: it shadows
// the others' steps, advances p by them, and takes the root's optimizer
// state (every rank has stepped at least once, so all hold the same
// buffers). It returns whether a shadowed step agreed to stop.
func (w *worker[T]) finishJoin(j *ddp.Joiner[T], p *position) (bool, error) {
	if err := j.Finish(w.comm); err != nil {
		return false, fmt.Errorf("trainer: %w", err)
	}
	p.step += j.Shadowed()
	p.global += int64(j.Shadowed())
	if _, ok := w.rep.(*zero.ZeRO1[T]); ok {
		return j.Stopped(), nil // every shard stepped at every iteration
	}
	st, err := w.rep.GatherOptimizerState(w.comm, w.g.Rank())
	if err != nil {
		return false, err
	}
	head := []float64{float64(st.Step)}
	if err := allreduce.Broadcast(w.comm, w.g, head, j.Root()); err != nil {
		return false, fmt.Errorf("trainer: join: broadcasting the optimizer's step: %w", err)
	}
	st.Step = int64(head[0])
	for _, b := range st.Buffers {
		if err := allreduce.Broadcast(w.comm, w.g, b.Data, j.Root()); err != nil {
			return false, fmt.Errorf("trainer: join: broadcasting optimizer buffer %s: %w", b.Name, err)
		}
	}
	return j.Stopped(), w.rep.LoadFullOptimizerState(st)
}
