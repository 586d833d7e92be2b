package ddp

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// The optimizer in backward (PyTorch: _apply_optimizer_in_backward, DDP's
// overlapped optimizer): with WithOptimizerInBackward a synchronised Run
// updates every bucket's parameters as soon as the bucket's collective has
// completed, while the collectives of the later buckets run, instead of
// leaving the whole update to Step. A Run is then:
//
//  1. before the forward pass, BeginStep fixes the step's constants (Adam's
//     bias corrections for step t: the step count advances once per step,
//     not once per bucket);
//  2. each bucket is all-reduced with allreduce.AllReduceRanges (all but
//     the last by the communication goroutine, the last by Run's own
//     goroutine after the backward pass: communicate.go), and each part
//     of it that the all-reduce reports final (this rank's chunk after
//     the reduce-scatter, then each chunk the all-gather brings) goes to
//     the update goroutine, which applies StepBucket to it; a bucket's
//     update thus overlaps the rest of its own all-gather, the
//     collectives of the later buckets and the rest of the backward pass;
//  3. after the last collective Run's goroutine applies what is left of
//     the queue beside the update goroutine, without sleeping
//     (overlap_queue.go), then EndStep; Step then only counts the step
//     (and runs the replica check).
//
// The optimizers are element-wise over the arena, so updating it range by
// range gives bitwise the parameters and state of one update of the whole
// arena (see optim.Ranged). A global quantity of the gradient, such as the
// norm that clipping by global norm needs, cannot be known before the last
// bucket is reduced: this package clips nothing, and an optimizer that
// needs such a quantity must not be given to WithOptimizerInBackward (it
// does not implement RangedOptimizer).
//
// What stays exposed is the update of the last part of the last bucket to
// become final, which can only start once it has arrived, and the end of
// Run and Step: StepStats.OptimizerExposed measures it (see docs/ddp.md).

// RangedOptimizer is an optimizer whose step can be applied range by range
// (optim's SGD, Adam and AdamW; optim.Ranged): BeginStep(n), StepRange for
// ranges that cover [0, n) once (element i of params is element off+i of
// its state), EndStep. Run calls StepRange from two goroutines at once,
// on disjoint ranges; it must only read grads, which peers may be reading
// too while the collective runs.
type RangedOptimizer[T Float] interface {
	BeginStep(n int) error
	StepRange(params, grads []T, off int) error
	EndStep() error
}

// BucketStepper applies an optimizer bucket by bucket: BeginStep before the
// step's backward pass, StepBucket(b, lo, hi) once bucket b (the element
// range [lo, hi) of the arenas) has been communicated, EndStep after the
// last. zero's ZeRO-1 is one, updating its piece of each bucket.
type BucketStepper interface {
	BeginStep() error
	StepBucket(b, lo, hi int) error
	EndStep() error
}

// WithOptimizerInBackward makes every synchronised Run apply opt to each
// bucket as soon as its collective completes (see above); Step must then
// be given opt (or nil) and only counts the step. Since Run applies the
// update, a change of hyper-parameters for a step (opt.SetLR of a
// schedule) must be made before that step's Run, not between Run and Step.
func WithOptimizerInBackward[T Float](opt RangedOptimizer[T]) Option {
	return func(c *config) { c.ext.inBackward = opt }
}

// WithBucketStepper is WithOptimizerInBackward with the update of a bucket
// given by s, for wrappers that keep the optimizer state elsewhere (zero).
// It takes the place of WithOptimizerInBackward.
func WithBucketStepper(s BucketStepper) Option { return func(c *config) { c.ext.stepper = s } }

// OptimizerInBackward returns the optimizer that opts give to
// WithOptimizerInBackward (nil: none), for wrappers such as zero that
// implement it with WithBucketStepper.
func OptimizerInBackward(opts ...Option) any {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c.ext.inBackward
}

// extConfig is the configuration of the optimizer in backward, Join and
// unused parameters.
type extConfig struct {
	inBackward any           // RangedOptimizer[T] or nil
	stepper    BucketStepper // nil: none, or built from inBackward
	findUnused bool          // WithFindUnusedParameters
}

// arenaStepper is the BucketStepper of WithOptimizerInBackward: opt over
// the whole arenas.
type arenaStepper[T Float] struct {
	d   *DDP[T]
	opt RangedOptimizer[T]
}

func (s arenaStepper[T]) BeginStep() error { return s.opt.BeginStep(len(s.d.paramArena)) }
func (s arenaStepper[T]) StepBucket(_, lo, hi int) error {
	return s.opt.StepRange(s.d.paramArena[lo:hi], s.d.gradArena[lo:hi], lo)
}
func (s arenaStepper[T]) EndStep() error { return s.opt.EndStep() }

// setupStepper makes d's BucketStepper from its configuration (Wrap).
func (d *DDP[T]) setupStepper() error {
	e := d.cfg.ext
	switch {
	case e.stepper != nil:
		d.stepper = e.stepper
	case e.inBackward != nil:
		opt, ok := e.inBackward.(RangedOptimizer[T])
		if !ok {
			return fmt.Errorf("ddp: optimizer in backward %T does not update range by range over the wrapper's element type", e.inBackward)
		}
		d.stepper = arenaStepper[T]{d: d, opt: opt}
	}
	return nil
}

// Step applies opt to the parameter arena with the gradient arena, then
// (every k steps with WithReplicaCheck) checks that replicas agree. With
// WithOptimizerInBackward the synchronised Run has applied the optimizer
// already: opt must be that optimizer or nil, and Step only counts the
// step.
func (d *DDP[T]) Step(ctx context.Context, opt Optimizer[T]) error {
	var start time.Time // of the update, when Step makes it
	if d.stepper == nil {
		start = time.Now()
	}
	if err := d.applyStep(opt); err != nil {
		return err
	}
	d.accumulating = false
	d.steps++
	end := time.Now()
	d.statsMu.Lock()
	if d.stepper == nil {
		d.last.Optimizer = end.Sub(start)
		d.last.OptimizerTotal = d.last.Optimizer
	}
	if !d.last.CommEnd.IsZero() {
		d.last.OptimizerExposed = end.Sub(d.last.CommEnd)
	}
	d.statsMu.Unlock()
	if d.cfg.checkEvery > 0 && d.steps%int64(d.cfg.checkEvery) == 0 {
		return d.CheckReplicas(ctx)
	}
	return nil
}

// applyStep is Step's update: opt over the arenas, or, with the optimizer
// in backward, the check that the last Run applied it.
func (d *DDP[T]) applyStep(opt Optimizer[T]) error {
	if d.stepper == nil {
		if opt == nil {
			return errors.New("ddp: Step with a nil optimizer")
		}
		if err := opt.Step(d.paramArena, d.gradArena); err != nil {
			return fmt.Errorf("ddp: optimizer step: %w", err)
		}
		return nil
	}
	if opt != nil && !sameOptimizer(opt, d.cfg.ext.inBackward) {
		return fmt.Errorf("ddp: Step with optimizer %T, but Run applies the one given to WithOptimizerInBackward (pass it, or nil)", opt)
	}
	if !d.updated {
		return errors.New("ddp: Step without a synchronised Run before it: with WithOptimizerInBackward the update runs in Run (not under NoSync)")
	}
	d.updated = false
	return nil
}

// sameOptimizer reports whether a is b, or cannot be told apart from it
// (values of types without ==, which Step cannot compare).
func sameOptimizer(a, b any) bool {
	if b == nil {
		return true // a custom BucketStepper: Step's optimizer is not used
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false
	}
	return !ta.Comparable() || a == b
}
