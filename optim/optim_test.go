package optim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optCase is one optimizer configuration exercised by the tests.
type optCase struct {
	name string
	kind string // nameSGD, nameAdam, nameAdamW
	sgd  SGDConfig
	adam AdamConfig
}

func sgdCase(name string, c SGDConfig) optCase { return optCase{name: name, kind: nameSGD, sgd: c} }
func adamCase(name, kind string, c AdamConfig) optCase {
	return optCase{name: name, kind: kind, adam: c}
}

var cases = []optCase{
	sgdCase("sgd/plain", SGDConfig{LR: 0.1}),
	sgdCase("sgd/momentum=0+wd", SGDConfig{LR: 0.1, WeightDecay: 0.05}),
	sgdCase("sgd/momentum", SGDConfig{LR: 0.1, Momentum: 0.9}),
	sgdCase("sgd/momentum+dampening", SGDConfig{LR: 0.05, Momentum: 0.8, Dampening: 0.3}),
	sgdCase("sgd/momentum+wd", SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-2}),
	sgdCase("sgd/nesterov", SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true}),
	sgdCase("sgd/nesterov+wd", SGDConfig{LR: 0.03, Momentum: 0.5, WeightDecay: 0.1, Nesterov: true}),
	adamCase("adam/default", nameAdam, DefaultAdamConfig()),
	adamCase("adam/wd", nameAdam, AdamConfig{LR: 1e-2, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1}),
	adamCase("adam/beta1=0", nameAdam, AdamConfig{LR: 1e-2, Beta1: 0, Beta2: 0.9, Eps: 1e-8}),
	adamCase("adamw/default", nameAdamW, DefaultAdamWConfig()),
	adamCase("adamw/wd", nameAdamW, AdamConfig{LR: 5e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}),
	adamCase("adamw/wd=0", nameAdamW, AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}),
}

func build[T Float](t testing.TB, c optCase) Optimizer[T] {
	t.Helper()
	var (
		o   Optimizer[T]
		err error
	)
	switch c.kind {
	case nameSGD:
		o, err = NewSGD[T](c.sgd)
	case nameAdam:
		o, err = NewAdam[T](c.adam)
	case nameAdamW:
		o, err = NewAdamW[T](c.adam)
	}
	require.NoError(t, err)
	require.Equal(t, c.kind, o.Name())
	return o
}

type refOpt interface {
	step(param, grad []float64)
	setLR(lr float64)
}

func (r *refSGD) setLR(lr float64)  { r.lr = lr }
func (r *refAdam) setLR(lr float64) { r.lr = lr }

func (c optCase) ref() refOpt {
	if c.kind == nameSGD {
		s := c.sgd
		return &refSGD{lr: s.LR, momentum: s.Momentum, dampening: s.Dampening, wd: s.WeightDecay, nesterov: s.Nesterov}
	}
	a := c.adam
	return &refAdam{lr: a.LR, beta1: a.Beta1, beta2: a.Beta2, eps: a.Eps, wd: a.WeightDecay, decoupled: c.kind == nameAdamW}
}

// schedule is the learning rate to use at step t (0-based), from the base lr:
// halved from step 3 on, to exercise SetLR between steps.
func schedule(base float64, t int) float64 {
	if t >= 3 {
		return base / 2
	}
	return base
}

func (c optCase) baseLR() float64 {
	if c.kind == nameSGD {
		return c.sgd.LR
	}
	return c.adam.LR
}

// data returns deterministic initial parameters and per-step gradients whose
// values are all exact float32 values, so both element types get the same
// inputs.
func data(seed uint64, n, steps int) (init []float64, grads [][]float64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	f32 := func() float64 { return float64(float32(rng.NormFloat64())) }
	init = make([]float64, n)
	for i := range init {
		init[i] = f32()
	}
	grads = make([][]float64, steps)
	for s := range grads {
		grads[s] = make([]float64, n)
		for i := range grads[s] {
			grads[s][i] = f32()
		}
	}
	return init, grads
}

func conv[T Float](x []float64) []T {
	out := make([]T, len(x))
	for i, v := range x {
		out[i] = T(v)
	}
	return out
}

func widen[T Float](x []T) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// stepAt sets the scheduled lr for step t then steps.
func stepAt[T Float](t testing.TB, o Optimizer[T], c optCase, step int, p, g []T) {
	t.Helper()
	require.NoError(t, o.SetLR(schedule(c.baseLR(), step)))
	require.NoError(t, o.Step(p, g))
}

func TestMatchesPyTorchReference(t *testing.T) {
	const n, steps = 37, 7
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			init, grads := data(1, n, steps)
			want := append([]float64(nil), init...)
			r := c.ref()
			for s := 0; s < steps; s++ {
				r.setLR(schedule(c.baseLR(), s))
				r.step(want, grads[s])
			}
			t.Run("float64", func(t *testing.T) {
				got := compareRun[float64](t, c, init, grads)
				assertClose(t, want, got, 1e-13)
			})
			t.Run("float32", func(t *testing.T) {
				got := compareRun[float32](t, c, init, grads)
				assertClose(t, want, got, 1e-6)
			})
		})
	}
}

func compareRun[T Float](t *testing.T, c optCase, init []float64, grads [][]float64) []float64 {
	o := build[T](t, c)
	p := conv[T](init)
	for s := range grads {
		stepAt(t, o, c, s, p, conv[T](grads[s]))
	}
	require.EqualValues(t, len(grads), o.Steps())
	return widen(p)
}

// assertClose checks |got-want| <= tol*(1+|want|) element-wise and logs the
// largest relative difference seen.
func assertClose(t *testing.T, want, got []float64, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	worst := 0.0
	for i := range want {
		d := math.Abs(got[i]-want[i]) / (1 + math.Abs(want[i]))
		worst = max(worst, d)
		if !(d <= tol) {
			t.Fatalf("element %d: got %v, want %v (scaled diff %g > %g)", i, got[i], want[i], d, tol)
		}
	}
	t.Logf("max scaled diff vs reference: %g", worst)
}

func bitsEqual[T Float](t *testing.T, want, got []T) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		if math.Float64bits(float64(want[i])) != math.Float64bits(float64(got[i])) {
			t.Fatalf("element %d: got %v, want %v (not bitwise equal)", i, got[i], want[i])
		}
	}
}

// bounds cuts n elements into k contiguous chunks whose sizes differ by at
// most one (the ring's chunking), returning k+1 offsets.
func bounds(n, k int) []int {
	b := make([]int, k+1)
	for i := 0; i < k; i++ {
		size := n / k
		if i < n%k {
			size++
		}
		b[i+1] = b[i] + size
	}
	return b
}

func forBothTypes(t *testing.T, f func(t *testing.T, c optCase, dtype string)) {
	for _, c := range cases {
		for _, dt := range []string{DTypeFloat64, DTypeFloat32} {
			t.Run(c.name+"/"+dt, func(t *testing.T) { f(t, c, dt) })
		}
	}
}

func TestShardedEqualsFullBitwise(t *testing.T) {
	forBothTypes(t, func(t *testing.T, c optCase, dt string) {
		if dt == DTypeFloat32 {
			shardedEqualsFull[float32](t, c)
		} else {
			shardedEqualsFull[float64](t, c)
		}
	})
}

func shardedEqualsFull[T Float](t *testing.T, c optCase) {
	const n, steps = 41, 6
	init, grads := data(2, n, steps)
	full := conv[T](init)
	o := build[T](t, c)
	for s := 0; s < steps; s++ {
		stepAt(t, o, c, s, full, conv[T](grads[s]))
	}
	splits := [][]int{{0, n}, {0, 0, n}, {0, 1, n}, {0, 20, n}, {0, n - 1, n}, {0, n, n}, bounds(n, 3), bounds(n, 7)}
	for _, b := range splits {
		p := conv[T](init)
		opts := make([]Optimizer[T], len(b)-1)
		for i := range opts {
			opts[i] = build[T](t, c)
		}
		for s := 0; s < steps; s++ {
			g := conv[T](grads[s])
			for i, so := range opts {
				stepAt(t, so, c, s, p[b[i]:b[i+1]], g[b[i]:b[i+1]])
			}
		}
		bitsEqual(t, full, p)
	}
}

func TestSliceConcatInverse(t *testing.T) {
	o, err := NewSGD[float64](SGDConfig{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	init, grads := data(6, 17, 1)
	require.NoError(t, o.Step(conv[float64](init), grads[0]))
	full := o.State()
	b := bounds(17, 5)
	parts := make([]State, 5)
	for i := range parts {
		parts[i], err = SliceState(full, b[i], b[i+1])
		require.NoError(t, err)
		require.Equal(t, b[i+1]-b[i], parts[i].Len)
	}
	parts[0].Buffers[0].Data[0] = 42 // slices must not alias the source
	require.NotEqual(t, 42.0, full.Buffers[0].Data[0])
	parts[0].Buffers[0].Data[0] = full.Buffers[0].Data[0]
	back, err := ConcatStates(parts)
	require.NoError(t, err)
	require.Equal(t, full, back)
}

func TestConfigValidation(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	sgdBad := []struct {
		cfg   SGDConfig
		field string
	}{
		{SGDConfig{LR: -1}, "LR"},
		{SGDConfig{LR: nan}, "LR"},
		{SGDConfig{LR: inf}, "LR"},
		{SGDConfig{LR: 0.1, Momentum: -0.1}, "Momentum"},
		{SGDConfig{LR: 0.1, Dampening: nan}, "Dampening"},
		{SGDConfig{LR: 0.1, WeightDecay: -1e-4}, "WeightDecay"},
		{SGDConfig{LR: 0.1, Nesterov: true}, "Nesterov"},
		{SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.1, Nesterov: true}, "Nesterov"},
	}
	for _, tc := range sgdBad {
		_, err := NewSGD[float32](tc.cfg)
		require.ErrorIs(t, err, ErrConfig, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.field)
	}
	adamBad := []struct {
		cfg   AdamConfig
		field string
	}{
		{AdamConfig{LR: -1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, "LR"},
		{AdamConfig{LR: 1e-3, Beta1: 1, Beta2: 0.999, Eps: 1e-8}, "Beta1"},
		{AdamConfig{LR: 1e-3, Beta1: -0.1, Beta2: 0.999, Eps: 1e-8}, "Beta1"},
		{AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 1, Eps: 1e-8}, "Beta2"},
		{AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: nan, Eps: 1e-8}, "Beta2"},
		{AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 0}, "Eps"},
		{AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: -1e-8}, "Eps"},
		{AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: -0.01}, "WeightDecay"},
	}
	for _, tc := range adamBad {
		_, err := NewAdam[float64](tc.cfg)
		require.ErrorIs(t, err, ErrConfig, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.field)
		assert.Contains(t, err.Error(), "adam")
		_, err = NewAdamW[float64](tc.cfg)
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), "adamw")
	}
	// Defaults are PyTorch's and valid.
	assert.Equal(t, SGDConfig{LR: 1e-3}, DefaultSGDConfig())
	assert.Equal(t, AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, DefaultAdamConfig())
	assert.Equal(t, 0.01, DefaultAdamWConfig().WeightDecay)
	require.NoError(t, DefaultSGDConfig().Validate())
	require.NoError(t, DefaultAdamConfig().Validate())
	require.NoError(t, DefaultAdamWConfig().Validate())

	for _, c := range cases {
		o := build[float32](t, c)
		require.ErrorIs(t, o.SetLR(-1), ErrConfig)
		require.ErrorIs(t, o.SetLR(nan), ErrConfig)
		require.Equal(t, c.baseLR(), o.LR())
		require.NoError(t, o.SetLR(0.5))
		require.Equal(t, 0.5, o.LR())
	}
}

func TestLengthMismatch(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := build[float64](t, c)
			err := o.Step(make([]float64, 3), make([]float64, 4))
			require.ErrorIs(t, err, ErrLength)
			assert.Contains(t, err.Error(), "len(params) = 3, len(grads) = 4")
			require.EqualValues(t, 0, o.Steps())

			p := []float64{1, 2, 3}
			require.NoError(t, o.Step(p, []float64{0.1, 0.2, 0.3}))
			before := append([]float64(nil), p...)
			st := o.State()
			err = o.Step([]float64{1, 2}, []float64{1, 2})
			require.ErrorIs(t, err, ErrLength)
			assert.Contains(t, err.Error(), "state holds 3 elements, len(params) = 2")
			err = o.Step(p, []float64{1, 2})
			require.ErrorIs(t, err, ErrLength)
			require.Equal(t, before, p, "failed Step changed params")
			require.Equal(t, st, o.State(), "failed Step changed state")
		})
	}
}

func TestLoadStateErrors(t *testing.T) {
	newAdam := func() *Adam[float32] {
		o, err := NewAdam[float32](DefaultAdamConfig())
		require.NoError(t, err)
		require.NoError(t, o.Step([]float32{1, 2, 3, 4}, []float32{1, 1, 1, 1}))
		return o
	}
	good := newAdam().State()
	mutate := func(f func(s *State)) State {
		s := good.Clone()
		f(&s)
		return s
	}
	bad := []struct {
		s    State
		want string
	}{
		{mutate(func(s *State) { s.Optimizer = "adamw" }), `state is for "adamw", optimizer is "adam"`},
		{mutate(func(s *State) { s.DType = DTypeFloat64 }), `DType "float64"`},
		{mutate(func(s *State) { s.DType = "bf16" }), `DType "bf16"`},
		{mutate(func(s *State) { s.Buffers[1].Data = s.Buffers[1].Data[:3] }), `buffer "exp_avg_sq" has 3 elements, Len = 4`},
		{mutate(func(s *State) { s.Buffers = s.Buffers[:1] }), `buffers ["exp_avg"], want ["exp_avg" "exp_avg_sq"]`},
		{mutate(func(s *State) { s.Buffers[1].Name = "v" }), `lacks buffer "exp_avg_sq"`},
		{mutate(func(s *State) { s.Buffers[1].Name = "exp_avg" }), `buffer "exp_avg" appears twice`},
		{mutate(func(s *State) { s.Hyper = s.Hyper[1:] }), `lacks hyper-parameter "lr"`},
		{mutate(func(s *State) { s.Hyper = append(s.Hyper, Hyper{"amsgrad", 1}) }), `unknown hyper-parameter "amsgrad"`},
		{mutate(func(s *State) { s.Hyper[1].Value = 1 }), "Beta1"},
		{mutate(func(s *State) { s.Step = 0 }), "Step = 0 but Len = 4"},
		{mutate(func(s *State) { s.Step = -1 }), "Step = -1"},
		{mutate(func(s *State) { s.Buffers[0].Data[2] = 0.1 }), `buffer "exp_avg"[2] = 0.1 is not a float32 value`},
	}
	for _, tc := range bad {
		o := newAdam()
		before := o.State()
		err := o.LoadState(tc.s)
		require.ErrorIs(t, err, ErrState, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		require.Equal(t, before, o.State(), "failed LoadState changed the optimizer")
	}

	// SGD: momentum buffer required exactly when momentum != 0 and Step > 0.
	o, err := NewSGD[float64](SGDConfig{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	require.NoError(t, o.Step([]float64{1, 2}, []float64{1, 1}))
	s := o.State()
	s.Buffers = nil
	require.ErrorContains(t, o.LoadState(s), `buffers [], want ["momentum_buffer"]`)
	s = o.State()
	s.Hyper[1].Value = 0 // momentum 0 → no buffer allowed
	require.ErrorContains(t, o.LoadState(s), `buffers ["momentum_buffer"], want []`)
	s = o.State()
	s.Hyper[4].Value = 0.5
	require.ErrorContains(t, o.LoadState(s), "nesterov = 0.5")

	_, err = NewFromState[float64](State{Optimizer: "lamb", DType: DTypeFloat64})
	require.ErrorIs(t, err, ErrState)
	require.ErrorContains(t, err, `unknown optimizer "lamb"`)
}

func TestConcatSliceErrors(t *testing.T) {
	mk := func(steps int, lr float64) State {
		o, err := NewAdam[float64](AdamConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		require.NoError(t, err)
		for i := 0; i < steps; i++ {
			require.NoError(t, o.Step([]float64{1, 2, 3}, []float64{1, 1, 1}))
		}
		return o.State()
	}
	_, err := ConcatStates(nil)
	require.ErrorIs(t, err, ErrState)
	_, err = ConcatStates([]State{mk(2, 1e-3), mk(3, 1e-3)})
	require.ErrorContains(t, err, "shard 0 Step 2, shard 1 Step 3")
	_, err = ConcatStates([]State{mk(2, 1e-3), mk(2, 1e-3), mk(2, 2e-3)})
	require.ErrorContains(t, err, "shard 0 hyper-parameter lr = 0.001, shard 2 lr = 0.002")
	sgd, err := NewSGD[float64](DefaultSGDConfig())
	require.NoError(t, err)
	_, err = ConcatStates([]State{mk(0, 1e-3), sgd.State()})
	require.ErrorContains(t, err, `shard 0 is "adam", shard 1 is "sgd"`)
	broken := mk(1, 1e-3)
	broken.Len = 5
	_, err = ConcatStates([]State{mk(1, 1e-3), broken})
	require.ErrorContains(t, err, "shard 1:")

	s := mk(1, 1e-3)
	for _, r := range [][2]int{{-1, 2}, {2, 1}, {0, 4}} {
		_, err = SliceState(s, r[0], r[1])
		require.ErrorIs(t, err, ErrState)
		require.ErrorContains(t, err, "out of range for Len 3")
	}
	fresh, err := SliceState(mk(0, 1e-3), 10, 20)
	require.NoError(t, err, "a step-0 state can be cut anywhere")
	require.Equal(t, 0, fresh.Len)
}

func TestStateBytes(t *testing.T) {
	sgd, err := NewSGD[float32](SGDConfig{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	require.EqualValues(t, 0, sgd.StateBytes())
	require.NoError(t, sgd.Step(make([]float32, 10), make([]float32, 10)))
	require.EqualValues(t, 40, sgd.StateBytes())
	plain, err := NewSGD[float64](SGDConfig{LR: 0.1})
	require.NoError(t, err)
	require.NoError(t, plain.Step(make([]float64, 10), make([]float64, 10)))
	require.EqualValues(t, 0, plain.StateBytes())
	adam, err := NewAdamW[float64](DefaultAdamWConfig())
	require.NoError(t, err)
	require.NoError(t, adam.Step(make([]float64, 10), make([]float64, 10)))
	require.EqualValues(t, 160, adam.StateBytes())
}

func TestStepDoesNotAllocate(t *testing.T) {
	init, grads := data(7, 1000, 1)
	for _, c := range cases {
		o := build[float32](t, c)
		p, g := conv[float32](init), conv[float32](grads[0])
		require.NoError(t, o.Step(p, g)) // sizes the state
		allocs := testing.AllocsPerRun(20, func() {
			if err := o.Step(p, g); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, c.name)
	}
}

func TestErrorsAreSentinels(t *testing.T) {
	for _, e := range []error{ErrConfig, ErrLength, ErrState} {
		require.True(t, errors.Is(fmt.Errorf("x: %w", e), e))
	}
}

// BenchmarkAdamStep measures one Adam step; SetBytes is the parameter bytes
// updated per step (the step itself reads 4 and writes 3 arrays of that size).
func BenchmarkAdamStep(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 20} {
		b.Run(fmt.Sprintf("dtype=float32/n=%d", n), func(b *testing.B) { benchAdam[float32](b, n) })
		b.Run(fmt.Sprintf("dtype=float64/n=%d", n), func(b *testing.B) { benchAdam[float64](b, n) })
	}
}

func benchAdam[T Float](b *testing.B, n int) {
	o, err := NewAdam[T](DefaultAdamConfig())
	require.NoError(b, err)
	init, grads := data(8, n, 1)
	p, g := conv[T](init), conv[T](grads[0])
	require.NoError(b, o.Step(p, g))
	b.SetBytes(int64(n) * sizeOf[T]())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := o.Step(p, g); err != nil {
			b.Fatal(err)
		}
	}
}
