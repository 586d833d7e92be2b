package optim

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/ringddp/ringddp/numeric"
)

// Float is the element type the optimizers work on (numeric.Float).
type Float = numeric.Float

// Optimizer updates parameters in place from their gradients.
//
// params and grads are flat slices of equal length: a whole parameter arena or
// a shard of one. The state is sized to len(params) at the first Step; every
// later Step must pass slices of that same length.
type Optimizer[T Float] interface {
	// Step applies one update to params from grads; grads is not modified.
	// It returns an error wrapping ErrLength, and changes nothing, when
	// len(params) != len(grads) or the length differs from the state's.
	Step(params, grads []T) error
	// State returns a deep copy of the optimizer state (see the package doc).
	State() State
	// LoadState replaces the optimizer state (step count, hyper-parameters and
	// buffers) with a copy of s. On error (wrapping ErrState or ErrConfig and
	// naming what mismatched) the optimizer is unchanged.
	LoadState(s State) error
	// StateBytes is the number of bytes of per-element state held (momentum
	// buffer; Adam's exp_avg and exp_avg_sq).
	StateBytes() int64
	// Name is "sgd", "adam" or "adamw".
	Name() string
	// LR returns the current learning rate.
	LR() float64
	// SetLR sets the learning rate used from the next Step on (for schedules).
	// It returns an error wrapping ErrConfig if lr is negative or not finite.
	SetLR(lr float64) error
	// Steps returns the number of completed steps.
	Steps() int64
}

// Sentinel errors; every error returned by this package wraps one of them.
var (
	// ErrConfig: an invalid hyper-parameter.
	ErrConfig = errors.New("optim: invalid hyper-parameter")
	// ErrLength: params, grads and state disagree on the number of elements.
	ErrLength = errors.New("optim: length mismatch")
	// ErrState: a State that is malformed or does not fit the optimizer/shards.
	ErrState = errors.New("optim: state mismatch")
	// ErrStepOrder: a ranged step's calls out of order (StepRange or
	// EndStep outside BeginStep … EndStep, BeginStep inside one).
	ErrStepOrder = errors.New("optim: step calls out of order")
)

// Data type names used in State.DType.
const (
	DTypeFloat32 = numeric.Float32
	DTypeFloat64 = numeric.Float64
)

// dtypeOf names T's underlying floating-point type.
func dtypeOf[T Float]() string { return numeric.NameOf[T]() }

func sizeOf[T Float]() int64 {
	var z T
	return int64(unsafe.Sizeof(z))
}

func configErr(opt, field string, v float64, want string) error {
	return fmt.Errorf("%w: %s: %s = %v, want %s", ErrConfig, opt, field, v, want)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func checkLR(opt string, lr float64) error {
	if !(lr >= 0) || !finite(lr) {
		return configErr(opt, "LR", lr, ">= 0 and finite")
	}
	return nil
}

func checkNonNeg(opt, field string, v float64) error {
	if !(v >= 0) || !finite(v) {
		return configErr(opt, field, v, ">= 0 and finite")
	}
	return nil
}

// checkLens validates one Step's slices against each other and against the
// sized state (sized is false before the first Step).
func checkLens(opt string, sized bool, n, np, ng int) error {
	if np != ng {
		return fmt.Errorf("%w: %s: len(params) = %d, len(grads) = %d", ErrLength, opt, np, ng)
	}
	if sized && np != n {
		return fmt.Errorf("%w: %s: state holds %d elements, len(params) = %d", ErrLength, opt, n, np)
	}
	return nil
}

// NewFromState builds the optimizer named by s.Optimizer, with the
// hyper-parameters recorded in s, and loads s into it: the way to resume from
// a checkpoint without knowing which optimizer wrote it.
func NewFromState[T Float](s State) (Optimizer[T], error) {
	switch s.Optimizer {
	case nameSGD:
		cfg, err := sgdConfigFromState(s)
		if err != nil {
			return nil, err
		}
		o, err := NewSGD[T](cfg)
		if err != nil {
			return nil, err
		}
		if err := o.LoadState(s); err != nil {
			return nil, err
		}
		return o, nil
	case nameAdam, nameAdamW:
		cfg, err := adamConfigFromState(s)
		if err != nil {
			return nil, err
		}
		var o *Adam[T]
		if s.Optimizer == nameAdam {
			o, err = NewAdam[T](cfg)
		} else {
			o, err = NewAdamW[T](cfg)
		}
		if err != nil {
			return nil, err
		}
		if err := o.LoadState(s); err != nil {
			return nil, err
		}
		return o, nil
	}
	return nil, fmt.Errorf("%w: unknown optimizer %q", ErrState, s.Optimizer)
}
