package optim

import (
	"fmt"

	"github.com/ringddp/ringddp/internal/vecops"
)

const nameSGD = "sgd"

// SGDConfig holds the hyper-parameters of SGD, with torch.optim.SGD's
// meaning. Zero fields are taken literally (momentum 0 is plain SGD); start
// from DefaultSGDConfig to get PyTorch's defaults.
type SGDConfig struct {
	LR          float64 // learning rate, >= 0 (PyTorch default 1e-3)
	Momentum    float64 // momentum factor, >= 0 (default 0)
	Dampening   float64 // dampening for momentum, finite (default 0)
	WeightDecay float64 // L2 penalty added to the gradient, >= 0 (default 0)
	Nesterov    bool    // Nesterov momentum; needs Momentum > 0 and Dampening == 0 (default false)
}

// DefaultSGDConfig returns torch.optim.SGD's defaults: lr 1e-3, no momentum,
// no dampening, no weight decay, no Nesterov.
func DefaultSGDConfig() SGDConfig { return SGDConfig{LR: 1e-3} }

// Validate returns an error wrapping ErrConfig naming the first invalid field.
func (c SGDConfig) Validate() error {
	if err := checkLR(nameSGD, c.LR); err != nil {
		return err
	}
	if err := checkNonNeg(nameSGD, "Momentum", c.Momentum); err != nil {
		return err
	}
	if !finite(c.Dampening) {
		return configErr(nameSGD, "Dampening", c.Dampening, "finite")
	}
	if err := checkNonNeg(nameSGD, "WeightDecay", c.WeightDecay); err != nil {
		return err
	}
	if c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0) {
		return fmt.Errorf("%w: %s: Nesterov needs Momentum > 0 and Dampening == 0, have Momentum = %v, Dampening = %v",
			ErrConfig, nameSGD, c.Momentum, c.Dampening)
	}
	return nil
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay, as torch.optim.SGD (maximize=False).
// Per element, with g the gradient and p the parameter:
//
//	g = g + weight_decay*p                       (if weight_decay != 0)
//	if momentum != 0:
//	    buf = g                                  (first step)
//	    buf = momentum*buf + (1-dampening)*g     (later steps)
//	    g = g + momentum*buf  if nesterov, else g = buf
//	p = p - lr*g
type SGD[T Float] struct {
	cfg  SGDConfig
	step int64
	n    int
	buf  []T // momentum_buffer; nil when Momentum == 0
	rs   rangeStep
	cur  vecops.SGD[T] // the step's constants, from BeginStep
}

var _ Optimizer[float32] = (*SGD[float32])(nil)

// NewSGD returns an SGD optimizer, or an error wrapping ErrConfig naming the
// invalid field.
func NewSGD[T Float](cfg SGDConfig) (*SGD[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SGD[T]{cfg: cfg}, nil
}

// Config returns the current hyper-parameters.
func (o *SGD[T]) Config() SGDConfig { return o.cfg }

// Name returns "sgd".
func (o *SGD[T]) Name() string { return nameSGD }

// LR returns the learning rate.
func (o *SGD[T]) LR() float64 { return o.cfg.LR }

// SetLR sets the learning rate for the following steps.
func (o *SGD[T]) SetLR(lr float64) error {
	if err := checkLR(nameSGD, lr); err != nil {
		return err
	}
	o.cfg.LR = lr
	return nil
}

// Steps returns the number of completed steps.
func (o *SGD[T]) Steps() int64 { return o.step }

// StateBytes returns the bytes held by the momentum buffer.
func (o *SGD[T]) StateBytes() int64 { return int64(len(o.buf)) * sizeOf[T]() }

// Step updates params in place from grads: BeginStep, StepRange over
// everything, EndStep.
func (o *SGD[T]) Step(params, grads []T) error {
	return stepAll[T](o, &o.rs, nameSGD, params, grads)
}

// BeginStep starts a ranged step over n elements (see Ranged).
func (o *SGD[T]) BeginStep(n int) error {
	if err := checkLens(nameSGD, o.step > 0, o.n, n, n); err != nil {
		return err
	}
	if err := o.rs.begin(nameSGD); err != nil {
		return err
	}
	if o.step == 0 {
		o.n = n
		if o.cfg.Momentum != 0 {
			if cap(o.buf) >= n {
				o.buf = o.buf[:n]
			} else {
				o.buf = make([]T, n)
			}
		}
	}
	o.cur = vecops.SGD[T]{
		NegLR:        T(-o.cfg.LR),
		WeightDecay:  T(o.cfg.WeightDecay),
		Mom:          T(o.cfg.Momentum),
		OneMinusDamp: T(1 - o.cfg.Dampening),
		Decay:        o.cfg.WeightDecay != 0,
		Nesterov:     o.cfg.Nesterov,
	}
	return nil
}

// StepRange updates params, elements [off, off+len(params)) of the step's
// n, from grads (see Ranged).
func (o *SGD[T]) StepRange(params, grads []T, off int) error {
	if err := o.rs.check(nameSGD, o.n, len(params), len(grads), off); err != nil {
		return err
	}
	k := len(params)
	p, g := params[:k], grads[:k]
	switch {
	case o.cfg.Momentum == 0:
		o.cur.Plain(o.rs.v, p, g)
	case o.step == 0:
		o.cur.First(o.rs.v, p, g, o.buf[off:off+k])
	default:
		o.cur.Momentum(o.rs.v, p, g, o.buf[off:off+k])
	}
	return nil
}

// EndStep ends a ranged step: the step count advances.
func (o *SGD[T]) EndStep() error {
	if err := o.rs.end(nameSGD); err != nil {
		return err
	}
	o.step++
	return nil
}

var sgdHyperNames = []string{"lr", "momentum", "dampening", "weight_decay", "nesterov"}

// State returns a deep copy of the state (layout in the package doc).
func (o *SGD[T]) State() State {
	nest := 0.0
	if o.cfg.Nesterov {
		nest = 1
	}
	s := State{
		Optimizer: nameSGD,
		DType:     dtypeOf[T](),
		Step:      o.step,
		Len:       o.n,
		Hyper: []Hyper{
			{"lr", o.cfg.LR}, {"momentum", o.cfg.Momentum}, {"dampening", o.cfg.Dampening},
			{"weight_decay", o.cfg.WeightDecay}, {"nesterov", nest},
		},
	}
	if o.cfg.Momentum != 0 && o.step > 0 {
		s.Buffers = []Buffer{{Name: "momentum_buffer", Data: toFloat64(o.buf)}}
	}
	return s
}

func sgdConfigFromState(s State) (SGDConfig, error) {
	var v [5]float64
	if err := lookupHypers(s, sgdHyperNames, v[:]); err != nil {
		return SGDConfig{}, err
	}
	if v[4] != 0 && v[4] != 1 {
		return SGDConfig{}, fmt.Errorf("%w: %s: hyper-parameter nesterov = %v, want 0 or 1", ErrState, s.Optimizer, v[4])
	}
	cfg := SGDConfig{LR: v[0], Momentum: v[1], Dampening: v[2], WeightDecay: v[3], Nesterov: v[4] == 1}
	if err := cfg.Validate(); err != nil {
		return SGDConfig{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	return cfg, nil
}

// LoadState replaces step count, hyper-parameters and momentum buffer with a
// copy of s.
func (o *SGD[T]) LoadState(s State) error {
	if err := checkHeader[T](s, nameSGD); err != nil {
		return err
	}
	cfg, err := sgdConfigFromState(s)
	if err != nil {
		return err
	}
	if cfg.Momentum != 0 && s.Step > 0 {
		err = checkBuffers(s, "momentum_buffer")
	} else {
		err = checkBuffers(s)
	}
	if err != nil {
		return err
	}
	o.cfg, o.step, o.n = cfg, s.Step, s.Len
	o.rs.open = false
	if cfg.Momentum != 0 && s.Step > 0 {
		o.buf = loadInto(o.buf, s.Buffers[0].Data)
	} else if cfg.Momentum == 0 {
		o.buf = nil
	} else {
		o.buf = o.buf[:0]
	}
	return nil
}
