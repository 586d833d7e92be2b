package optim

import (
	"fmt"

	"github.com/ringddp/ringddp/internal/vecops"
)

// Ranged is an optimizer whose step can be applied to its elements range by
// range, in any order, as the ranges' gradients become final: DDP's
// optimizer in backward (ddp.WithOptimizerInBackward) updates each gradient
// bucket as soon as its all-reduce completes. A step is
//
//  1. BeginStep(n): checks n against the state (sizing it at the first
//     step, as Step does) and fixes the step's constants, among them
//     Adam's bias corrections for step t = Steps()+1 and whether SGD's
//     momentum buffer is taken from the gradient (the first step);
//  2. StepRange(params, grads, off) for ranges that together cover [0, n)
//     once: element i of params and grads is element off+i of the
//     optimizer's state;
//  3. EndStep(): the step count advances, once per step.
//
// StepRange reads grads without writing them and writes only its own
// range of the parameters and the state, so ranges that do not overlap may
// be updated concurrently (DDP updates the parts of a bucket from two
// goroutines while the rest of the bucket is still being all-gathered).
// Because every update is element-wise and every range of a step uses the
// same constants, the ranges give bitwise the parameters and state of one
// Step over the whole slice (vecops' kernels are independent of where a
// slice starts and of its length). Step itself is BeginStep, one StepRange
// over everything and EndStep.
type Ranged[T Float] interface {
	BeginStep(n int) error
	StepRange(params, grads []T, off int) error
	EndStep() error
}

var (
	_ Ranged[float32] = (*SGD[float32])(nil)
	_ Ranged[float64] = (*Adam[float64])(nil)
)

// rangeStep is the part of a ranged step both optimizers share: the
// element count of the step in progress.
type rangeStep struct {
	open bool // between BeginStep and EndStep
	v    vecops.Variant
}

func (r *rangeStep) begin(opt string) error {
	if r.open {
		return fmt.Errorf("%w: %s: BeginStep before the previous step's EndStep", ErrStepOrder, opt)
	}
	v, err := vecops.Best()
	if err != nil {
		return err
	}
	r.v, r.open = v, true
	return nil
}

// check validates one StepRange against the state of n elements.
func (r *rangeStep) check(opt string, n, np, ng, off int) error {
	switch {
	case !r.open:
		return fmt.Errorf("%w: %s: StepRange outside BeginStep … EndStep", ErrStepOrder, opt)
	case np != ng:
		return fmt.Errorf("%w: %s: len(params) = %d, len(grads) = %d", ErrLength, opt, np, ng)
	case off < 0 || off > n || np > n-off:
		return fmt.Errorf("%w: %s: range [%d, %d) outside the state's %d elements", ErrLength, opt, off, off+np, n)
	}
	return nil
}

func (r *rangeStep) end(opt string) error {
	if !r.open {
		return fmt.Errorf("%w: %s: EndStep without BeginStep", ErrStepOrder, opt)
	}
	r.open = false
	return nil
}

// stepAll is the Step of a ranged optimizer: BeginStep, one StepRange over
// everything, EndStep. Mismatched lengths change nothing.
func stepAll[T Float](r Ranged[T], rs *rangeStep, opt string, params, grads []T) error {
	if err := checkLens(opt, false, 0, len(params), len(grads)); err != nil {
		return err
	}
	if err := r.BeginStep(len(params)); err != nil {
		return err
	}
	if err := r.StepRange(params, grads, 0); err != nil {
		rs.open = false
		return err
	}
	return r.EndStep()
}
