package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// Uneven inputs (PyTorch: torch.distributed.algorithms.Join with DDP as the
// joinable). Ranks may have different numbers of batches; a rank that has
// run out joins and shadows the collectives of the ranks that have not,
// until every rank is out. Vocabulary:
//
//   - active rank: one that still has a batch this iteration; it calls
//     Joiner.Run.
//   - joined rank: one that has called Joiner.Finish; it runs no forward
//     or backward pass and no optimizer step, and contributes zero
//     gradients (and a zero loss and stop vote) to the active ranks'
//     collectives.
//   - divisor: what the summed gradient is divided by. PyTorch's
//     divide_by_initial_world_size=True (its default, and this package's)
//     divides by the world size N even when ranks have joined, so every
//     sample weighs the same whichever rank saw it; False divides by the
//     number of active ranks, the mean over the batches seen in that
//     iteration, as training on the smaller world would.
//
// Every iteration, on every rank:
//
//  1. the count: one all-reduce (Sum) of 1 from each active rank and 0 from
//     each joined one gives the number of active ranks A (PyTorch's
//     per-iteration join all-reduce);
//  2. if A = 0, every rank has joined: the loop ends. Otherwise an active
//     rank runs its step (Run: the buckets all-reduce as usual), and a
//     joined rank shadows it: the same bucket collectives, in the same
//     order, of a zeroed gradient arena;
//  3. with the divisor A (DivideByActive), an active rank scales the
//     averaged gradient by N/A after the collectives: gradient = Σ/N·N/A,
//     within a rounding of Σ/A; the agreed loss is scaled the same way, so
//     it is the mean over active ranks either way.
//
// When all have joined, the ranks that joined last (in the same iteration)
// hold the most trained model; the highest of them broadcasts its
// parameters to all (PyTorch's _sync_final_model, the authoritative rank).
// The optimizer state is not synchronised: a joined rank's is that of its
// last step, as in PyTorch.
//
// With a communication hook (WithCommHook), a joined rank runs the hook
// on each zeroed bucket, as PyTorch's join hook does
// (_match_all_reduce_for_bwd_pass): the hook's collectives match the
// active ranks', and its per-rank state goes on. With error feedback the
// joined rank's input is its residual alone (zero gradient plus the
// residual), its new residual that input minus the output: so over the
// whole run N·Σ outputs + Σ residuals = Σ of every rank's gradients,
// joined ranks' zeros included, as without Join. The hook divides by the
// group size itself, so the divisor is N (DivideByActive is refused).
//
// With ZeRO-1 (zero.ZeRO1.Join) a joined rank reduce-scatters its zeroed
// buckets and then runs the wrapper's Step (JoinOptions.ShadowStep): it
// updates its shard of the parameters with the averaged gradient and
// takes part in the all-gather, as PyTorch's ZeroRedundancyOptimizer join
// hook does; its shard of the optimizer state stays current.
//
// A Joiner needs the default bucket collective, a hook, or a ShadowStep,
// and no WithReplicaCheck or WithOptimizerInBackward with DivideByActive
// (the scale comes after the collectives, when the update would be made).

// JoinOptions configures Join.
type JoinOptions struct {
	// DivideByActive divides the summed gradient by the number of active
	// ranks instead of the world size (PyTorch's
	// divide_by_initial_world_size=False). The default, false, is
	// PyTorch's default.
	DivideByActive bool
	// ShadowStep is what a joined rank runs after shadowing an iteration's
	// bucket collectives, for a wrapper whose Step has collectives of its
	// own: ZeRO-1's shard update and all-gather (zero.ZeRO1.Join sets it).
	// Nil for DDP, whose Step has none. Not with DivideByActive (the
	// averaged gradient is then the wrapper's, which Run does not scale).
	ShadowStep func(ctx context.Context) error
}

// Joiner runs the steps of one rank under Join (see above).
type Joiner[T Float] struct {
	d        *DDP[T]
	opts     JoinOptions
	joined   bool
	active   int // the last count
	count    []T // scratch of the count all-reduce
	lastJoin bool
	shadowed int  // iterations shadowed by Finish
	stopped  bool // a shadowed iteration agreed to stop (WithAgreement)
	root     int  // the authoritative rank, after Finish
}

// Join returns a Joiner for d's training loop: Run for every batch this
// rank has, then Finish once.
func (d *DDP[T]) Join(opts JoinOptions) (*Joiner[T], error) {
	switch {
	case d.reduce != nil && d.cfg.hook == nil && opts.ShadowStep == nil:
		return nil, errors.New("ddp: Join with a custom bucket collective needs JoinOptions.ShadowStep (such a wrapper, as ZeRO-1, may have collectives in Step too: use its own Join)")
	case opts.ShadowStep != nil && opts.DivideByActive:
		return nil, errors.New("ddp: Join with DivideByActive and a ShadowStep: the averaged gradient is the wrapper's, which Run cannot scale")
	case d.cfg.hook != nil && opts.DivideByActive:
		return nil, errors.New("ddp: Join with DivideByActive and a communication hook: the hook divides by the group size itself (PyTorch applies divide_by_initial_world_size only without a hook)")
	case d.cfg.checkEvery > 0:
		return nil, errors.New("ddp: Join with WithReplicaCheck: joined ranks take no steps, so the replicas differ until Finish")
	case opts.DivideByActive && d.stepper != nil:
		return nil, errors.New("ddp: Join with DivideByActive and the optimizer in backward: the update would be made before the gradient is scaled")
	}
	return &Joiner[T]{d: d, opts: opts, count: make([]T, 1)}, nil
}

// Shadowed is the number of iterations Finish shadowed: the steps the
// other ranks took after this one joined.
func (j *Joiner[T]) Shadowed() int { return j.shadowed }

// Stopped reports whether, with WithAgreement, the ranks agreed to stop in
// an iteration that Finish shadowed: the active ranks see it in Agreed,
// the joined rank here.
func (j *Joiner[T]) Stopped() bool { return j.stopped }

// Root is the rank whose parameters Finish gave every rank (the highest of
// the last to join).
func (j *Joiner[T]) Root() int { return j.root }

// Active is the number of ranks that were active in the last iteration.
func (j *Joiner[T]) Active() int { return j.active }

// countActive is step 1: the all-reduce of the count.
func (j *Joiner[T]) countActive(ctx context.Context, mine T) (int, error) {
	j.count[0] = mine
	if err := allreduce.AllReduce(ctx, j.d.group, j.count, allreduce.Sum); err != nil {
		return 0, fmt.Errorf("ddp: join: counting the active ranks: %w", err)
	}
	return int(j.count[0]), nil
}

// Run is one iteration of an active rank: the count, then d.Run, then the
// scale of DivideByActive.
func (j *Joiner[T]) Run(ctx context.Context, vm Machine) error {
	if j.joined {
		return errors.New("ddp: join: Run after Finish")
	}
	if j.d.noSync {
		return errors.New("ddp: join: Run under NoSync (joined ranks shadow synchronised steps only)")
	}
	a, err := j.countActive(ctx, 1)
	if err != nil {
		return err
	}
	j.active = a
	if err := j.d.Run(ctx, vm); err != nil {
		return err
	}
	if n := j.d.group.Size(); a < n {
		scale := float64(n) / float64(a)
		if j.opts.DivideByActive {
			for i, g := range j.d.gradArena {
				j.d.gradArena[i] = T(float64(g) * scale)
			}
		}
		j.d.agreed.Loss *= scale
	}
	return nil
}

// Finish joins: this rank has no more batches. It shadows the active
// ranks' iterations until every rank has joined, then sets every rank's
// parameters to those of the last rank to join.
func (j *Joiner[T]) Finish(ctx context.Context) error {
	if j.joined {
		return errors.New("ddp: join: Finish twice")
	}
	j.joined = true
	j.lastJoin = true
	for {
		a, err := j.countActive(ctx, 0)
		if err != nil {
			return err
		}
		j.active = a
		if a == 0 {
			break
		}
		stop, err := j.d.shadow(ctx)
		if err != nil {
			return fmt.Errorf("ddp: join: shadowing the active ranks' step: %w", err)
		}
		if j.opts.ShadowStep != nil {
			if err := j.opts.ShadowStep(ctx); err != nil {
				return fmt.Errorf("ddp: join: shadowing the active ranks' optimizer step: %w", err)
			}
		}
		j.stopped = j.stopped || stop
		j.lastJoin = false
		j.shadowed++
	}
	return j.syncFinal(ctx)
}

// syncFinal broadcasts the parameters of the highest rank among those that
// joined last (PyTorch's authoritative rank).
func (j *Joiner[T]) syncFinal(ctx context.Context) error {
	g := j.d.group
	j.count[0] = -1
	if j.lastJoin {
		j.count[0] = T(g.Rank())
	}
	if err := allreduce.AllReduce(ctx, g, j.count, allreduce.Max); err != nil {
		return fmt.Errorf("ddp: join: agreeing on the last rank to join: %w", err)
	}
	root := int(j.count[0])
	if root < 0 || root >= g.Size() {
		return fmt.Errorf("ddp: join: the last rank to join is %d, out of [0, %d)", root, g.Size())
	}
	j.root = root
	if err := allreduce.Broadcast(ctx, g, j.d.paramArena, root); err != nil {
		return fmt.Errorf("ddp: join: broadcasting rank %d's final parameters: %w", root, err)
	}
	return nil
}

// shadow runs the collectives of one synchronised Run with zero gradients
// and loss, and this rank's stop vote (WithAgreement), without a forward or
// backward pass: what a joined rank contributes to the active ranks' step.
// It returns whether the ranks agreed to stop.
func (d *DDP[T]) shadow(ctx context.Context) (bool, error) {
	d.beginStep()
	d.syncing = true
	clear(d.commArena)
	if d.arrivals != nil {
		// A stamp of now rather than 0, which would read as the shared
		// clock's epoch and make the straggler's lag absurd.
		d.writeStamp()
	}
	if len(d.extras) > 0 && d.cfg.vote() {
		d.extras[1] = 1
	}
	for b := range d.buckets {
		d.ready[b] <- struct{}{}
	}
	stats := StepStats{FirstBucketStart: -1}
	done := make(chan error, 1)
	d.reduceBuckets(ctx, time.Now(), &stats, nil, make(chan struct{}), done)
	if err := <-done; err != nil {
		return false, err
	}
	return len(d.extras) > 0 && d.extras[1] > 0, nil
}
