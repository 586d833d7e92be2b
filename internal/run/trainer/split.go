package trainer

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/graphlock"
)

// Splitting the global batch over ranks. Step s's global batch is the B
// positions [s·B, (s+1)·B) of the epoch's permutation (usage.go), on any
// world size N. Rank r takes positions r, r+N, r+2N, ... of it:
//
//	b_r = ⌊B/N⌋ + (1 if r < B mod N, else 0)
//
// examples, so the first B mod N ranks take one more when N does not
// divide B (an uneven split: after a failure, or at the start) and every
// example of the global batch is taken by exactly one rank.
//
// The gradient. Each rank's loss is the mean over its own examples,
// L_r = (1/b_r)·Σ_{i∈r} ℓ_i, and the gradient collectives average over
// ranks (Avg: the sum divided by N). The step's gradient is defined, as
// for an even split, as the gradient of the global batch's mean loss,
//
//	g = (1/B)·Σ_i ∇ℓ_i.
//
// An uneven split scales each rank's loss by its weight w_r = N·b_r/B
// (one multiplication node after the loss, so backward carries w_r into
// every gradient): (1/N)·Σ_r w_r·(1/b_r)·Σ_{i∈r} ∇ℓ_i = (1/B)·Σ_i ∇ℓ_i = g,
// and the agreed loss, the ranks' mean of w_r·L_r, is the global batch's
// mean loss. An even split has w_r = 1 and no node at all, so it is
// bitwise what it was. In floating point the uneven g differs from a
// one-process full-batch gradient by rounding only (the products by w_r and
// the order of the sums); the averaged gradient is the same, bitwise, on
// every rank, as for an even split.

// share is rank's number of examples b_r of a global batch of batch over
// n ranks.
func share(batch, n, rank int) int {
	b := batch / n
	if rank < batch%n {
		b++
	}
	return b
}

// lossWeight is rank's w_r = n·b_r/batch.
func lossWeight(batch, n, rank int) float64 {
	return float64(n*share(batch, n, rank)) / float64(batch)
}

// rankSlice is rank's share of the global batch global over n ranks:
// global[rank], global[rank+n], ...
func rankSlice(global []int, rank, n int) []int {
	mine := make([]int, 0, share(len(global), n, rank))
	for k := rank; k < len(global); k += n {
		mine = append(mine, global[k])
	}
	return mine
}

// weightLoss scales loss by this rank's weight (above) when the split is
// uneven; an even split returns loss itself.
func weightLoss(loss *G.Node, batch, n, rank int) (*G.Node, error) {
	if batch%n == 0 {
		return loss, nil
	}
	w := lossWeight(batch, n, rank)
	var out *G.Node
	err := graphlock.Do(func() error {
		var c *G.Node
		if loss.Dtype() == dtypeOf[float32]() {
			c = G.NewConstant(float32(w))
		} else {
			c = G.NewConstant(w)
		}
		var err error
		out, err = G.Mul(loss, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("trainer: weighting the loss of an uneven split: %w", err)
	}
	return out, nil
}

// batch is this rank's examples of step s, whose global batch is global:
// the sampler's batch on an even split (checked against global by the
// step), else its share of global.
func (w *worker[T]) batch(s int, global []int) []int {
	if w.uneven {
		return rankSlice(global, w.g.Rank(), w.g.Size())
	}
	return w.sampler.Batch(s, w.perRank)
}
