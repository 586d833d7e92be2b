package zero

import (
	"errors"

	"github.com/ringddp/ringddp/ddp"
)

// Join returns a Joiner for z's training loop (ddp.DDP.Join; PyTorch's
// Join with DDP and ZeroRedundancyOptimizer as joinables): Run, then Step,
// for every batch this rank has, then Finish once. A joined rank shadows
// each iteration: it reduce-scatters zero gradients, then runs Step, so it
// updates its own shard with the averaged gradient and takes part in the
// all-gather (PyTorch's ZeRO join hook). The divisor is the world size
// (PyTorch's divide_by_initial_world_size=True); with every shard updated
// at every iteration, the ranks' parameters and shard states stay those
// of a run where the joined ranks' batches were zero gradients.
func (z *ZeRO1[T]) Join() (*ddp.Joiner[T], error) {
	if z.ranged != nil {
		return nil, errors.New("zero: Join with the optimizer in backward: a shadowed iteration would not update the shard")
	}
	return z.d.Join(ddp.JoinOptions{ShadowStep: z.Step})
}
