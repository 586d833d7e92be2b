package optim

import (
	"fmt"
	"math"

	"github.com/ringddp/ringddp/internal/vecops"
)

const (
	nameAdam  = "adam"
	nameAdamW = "adamw"
)

// AdamConfig holds the hyper-parameters of Adam and AdamW, with
// torch.optim.Adam's / torch.optim.AdamW's meaning. Zero fields are taken
// literally; start from DefaultAdamConfig or DefaultAdamWConfig to get
// PyTorch's defaults.
type AdamConfig struct {
	LR          float64 // learning rate, >= 0 (default 1e-3)
	Beta1       float64 // decay of the first moment, in [0,1) (default 0.9)
	Beta2       float64 // decay of the second moment, in [0,1) (default 0.999)
	Eps         float64 // added to the denominator, > 0 (default 1e-8)
	WeightDecay float64 // >= 0; Adam: L2 added to the gradient (default 0); AdamW: decoupled (default 0.01)
}

// DefaultAdamConfig returns torch.optim.Adam's defaults: lr 1e-3,
// betas (0.9, 0.999), eps 1e-8, weight decay 0.
func DefaultAdamConfig() AdamConfig {
	return AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// DefaultAdamWConfig returns torch.optim.AdamW's defaults: lr 1e-3,
// betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
func DefaultAdamWConfig() AdamConfig {
	c := DefaultAdamConfig()
	c.WeightDecay = 0.01
	return c
}

func (c AdamConfig) validate(name string) error {
	if err := checkLR(name, c.LR); err != nil {
		return err
	}
	if !(c.Beta1 >= 0 && c.Beta1 < 1) {
		return configErr(name, "Beta1", c.Beta1, "in [0, 1)")
	}
	if !(c.Beta2 >= 0 && c.Beta2 < 1) {
		return configErr(name, "Beta2", c.Beta2, "in [0, 1)")
	}
	if !(c.Eps > 0) || !finite(c.Eps) {
		return configErr(name, "Eps", c.Eps, "> 0 and finite")
	}
	return checkNonNeg(name, "WeightDecay", c.WeightDecay)
}

// Validate returns an error wrapping ErrConfig naming the first invalid field.
func (c AdamConfig) Validate() error { return c.validate(nameAdam) }

// Adam is Adam (torch.optim.Adam) or, built by NewAdamW, AdamW
// (torch.optim.AdamW), both with amsgrad=False, maximize=False. Per element,
// at step t = 1, 2, … with g the gradient and p the parameter:
//
//	AdamW: p = p * (1 - lr*weight_decay)
//	Adam:  g = g + weight_decay*p                 (if weight_decay != 0)
//	m = beta1*m + (1-beta1)*g                     (exp_avg)
//	v = beta2*v + (1-beta2)*g*g                   (exp_avg_sq)
//	bias_correction1 = 1 - beta1^t
//	bias_correction2 = 1 - beta2^t
//	step_size = lr / bias_correction1
//	denom = sqrt(v) / sqrt(bias_correction2) + eps
//	p = p - step_size * (m / denom)
type Adam[T Float] struct {
	cfg       AdamConfig
	decoupled bool // AdamW
	step      int64
	n         int
	m, v      []T // exp_avg, exp_avg_sq; allocated at the first Step
	rs        rangeStep
	cur       vecops.Adam[T] // the step's constants, from BeginStep
}

var _ Optimizer[float32] = (*Adam[float32])(nil)

// NewAdam returns an Adam optimizer (weight decay as L2 on the gradient), or
// an error wrapping ErrConfig naming the invalid field.
func NewAdam[T Float](cfg AdamConfig) (*Adam[T], error) {
	if err := cfg.validate(nameAdam); err != nil {
		return nil, err
	}
	return &Adam[T]{cfg: cfg}, nil
}

// NewAdamW returns an AdamW optimizer (decoupled weight decay), or an error
// wrapping ErrConfig naming the invalid field.
func NewAdamW[T Float](cfg AdamConfig) (*Adam[T], error) {
	if err := cfg.validate(nameAdamW); err != nil {
		return nil, err
	}
	return &Adam[T]{cfg: cfg, decoupled: true}, nil
}

// Config returns the current hyper-parameters.
func (o *Adam[T]) Config() AdamConfig { return o.cfg }

// Name returns "adam" or "adamw".
func (o *Adam[T]) Name() string {
	if o.decoupled {
		return nameAdamW
	}
	return nameAdam
}

// LR returns the learning rate.
func (o *Adam[T]) LR() float64 { return o.cfg.LR }

// SetLR sets the learning rate for the following steps.
func (o *Adam[T]) SetLR(lr float64) error {
	if err := checkLR(o.Name(), lr); err != nil {
		return err
	}
	o.cfg.LR = lr
	return nil
}

// Steps returns the number of completed steps.
func (o *Adam[T]) Steps() int64 { return o.step }

// StateBytes returns the bytes held by exp_avg and exp_avg_sq.
func (o *Adam[T]) StateBytes() int64 { return int64(len(o.m)+len(o.v)) * sizeOf[T]() }

// Step updates params in place from grads: BeginStep, StepRange over
// everything, EndStep.
func (o *Adam[T]) Step(params, grads []T) error {
	return stepAll[T](o, &o.rs, o.Name(), params, grads)
}

// BeginStep starts a ranged step over n elements (see Ranged): the bias
// corrections are those of step t = Steps()+1.
func (o *Adam[T]) BeginStep(n int) error {
	if err := checkLens(o.Name(), o.step > 0, o.n, n, n); err != nil {
		return err
	}
	if err := o.rs.begin(o.Name()); err != nil {
		return err
	}
	if o.step == 0 {
		o.n = n
		o.m = zeroed(o.m, n)
		o.v = zeroed(o.v, n)
	}
	t := float64(o.step + 1)
	c := o.cfg
	bc1 := 1 - math.Pow(c.Beta1, t)
	bc2 := 1 - math.Pow(c.Beta2, t)
	o.cur = vecops.Adam[T]{
		NegStep:  T(-(c.LR / bc1)),
		Bc2Sqrt:  T(math.Sqrt(bc2)),
		Eps:      T(c.Eps),
		B1:       T(c.Beta1),
		OmB1:     T(1 - c.Beta1),
		B2:       T(c.Beta2),
		OmB2:     T(1 - c.Beta2),
		DecayMul: T(1 - c.LR*c.WeightDecay),
		L2:       T(c.WeightDecay),
	}
	switch {
	case c.WeightDecay == 0:
		o.cur.Decay = vecops.NoDecay
	case o.decoupled:
		o.cur.Decay = vecops.DecoupledDecay
	default:
		o.cur.Decay = vecops.L2Decay
	}
	return nil
}

// StepRange updates params, elements [off, off+len(params)) of the step's
// n, from grads (see Ranged).
func (o *Adam[T]) StepRange(params, grads []T, off int) error {
	if err := o.rs.check(o.Name(), o.n, len(params), len(grads), off); err != nil {
		return err
	}
	k := len(params)
	o.cur.Step(o.rs.v, params[:k], grads[:k], o.m[off:off+k], o.v[off:off+k])
	return nil
}

// EndStep ends a ranged step: the step count advances.
func (o *Adam[T]) EndStep() error {
	if err := o.rs.end(o.Name()); err != nil {
		return err
	}
	o.step++
	return nil
}

func zeroed[T Float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

var adamHyperNames = []string{"lr", "beta1", "beta2", "eps", "weight_decay"}

// State returns a deep copy of the state (layout in the package doc).
func (o *Adam[T]) State() State {
	c := o.cfg
	s := State{
		Optimizer: o.Name(),
		DType:     dtypeOf[T](),
		Step:      o.step,
		Len:       o.n,
		Hyper: []Hyper{
			{"lr", c.LR}, {"beta1", c.Beta1}, {"beta2", c.Beta2}, {"eps", c.Eps}, {"weight_decay", c.WeightDecay},
		},
	}
	if o.step > 0 {
		s.Buffers = []Buffer{
			{Name: "exp_avg", Data: toFloat64(o.m)},
			{Name: "exp_avg_sq", Data: toFloat64(o.v)},
		}
	}
	return s
}

func adamConfigFromState(s State) (AdamConfig, error) {
	var v [5]float64
	if err := lookupHypers(s, adamHyperNames, v[:]); err != nil {
		return AdamConfig{}, err
	}
	cfg := AdamConfig{LR: v[0], Beta1: v[1], Beta2: v[2], Eps: v[3], WeightDecay: v[4]}
	if err := cfg.validate(s.Optimizer); err != nil {
		return AdamConfig{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	return cfg, nil
}

// LoadState replaces step count, hyper-parameters, exp_avg and exp_avg_sq
// with a copy of s.
func (o *Adam[T]) LoadState(s State) error {
	if err := checkHeader[T](s, o.Name()); err != nil {
		return err
	}
	cfg, err := adamConfigFromState(s)
	if err != nil {
		return err
	}
	if s.Step > 0 {
		err = checkBuffers(s, "exp_avg", "exp_avg_sq")
	} else {
		err = checkBuffers(s)
	}
	if err != nil {
		return err
	}
	o.cfg, o.step, o.n = cfg, s.Step, s.Len
	o.rs.open = false
	if s.Step > 0 {
		o.m = loadInto(o.m, s.Buffer("exp_avg"))
		o.v = loadInto(o.v, s.Buffer("exp_avg_sq"))
	} else {
		o.m, o.v = o.m[:0], o.v[:0]
	}
	return nil
}
