package optim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRangedEqualsStepBitwise: a step applied range by range, the ranges in
// a shuffled order (as buckets complete), gives bitwise the parameters and
// the state of Step over the whole slice, for every optimizer case, both
// element types, odd lengths and ranges of every size including empty ones,
// with the learning rate changing between steps.
func TestRangedEqualsStepBitwise(t *testing.T) {
	forBothTypes(t, func(t *testing.T, c optCase, dt string) {
		for _, n := range []int{1, 17, 1003} {
			if dt == DTypeFloat32 {
				rangedEqualsStep[float32](t, c, n)
			} else {
				rangedEqualsStep[float64](t, c, n)
			}
		}
	})
}

func rangedEqualsStep[T Float](t *testing.T, c optCase, n int) {
	const steps = 4
	init, grads := data(uint64(n), n, steps)
	full := conv[T](init)
	o := build[T](t, c)
	for s := 0; s < steps; s++ {
		stepAt(t, o, c, s, full, conv[T](grads[s]))
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	p := conv[T](init)
	r := build[T](t, c).(Ranged[T])
	for s := 0; s < steps; s++ {
		require.NoError(t, r.(Optimizer[T]).SetLR(schedule(c.baseLR(), s)))
		g := conv[T](grads[s])
		cuts := []int{0, n}
		for k := rng.IntN(6); k > 0; k-- {
			cuts = append(cuts, rng.IntN(n+1))
		}
		slices.Sort(cuts)
		order := rng.Perm(len(cuts) - 1)
		require.NoError(t, r.BeginStep(n))
		for _, i := range order {
			lo, hi := cuts[i], cuts[i+1]
			require.NoError(t, r.StepRange(p[lo:hi], g[lo:hi], lo))
		}
		require.NoError(t, r.EndStep())
	}
	bitsEqual(t, full, p)
	want, got := o.State(), r.(Optimizer[T]).State()
	require.Equal(t, want.Step, got.Step)
	require.Equal(t, len(want.Buffers), len(got.Buffers))
	for k := range want.Buffers {
		bitsEqual(t, want.Buffers[k].Data, got.Buffers[k].Data)
	}
}

// TestRangedErrors: calls out of order and ranges outside the state are
// errors naming what was wrong, and change nothing.
func TestRangedErrors(t *testing.T) {
	for _, c := range []optCase{cases[2], cases[7]} {
		o := build[float32](t, c)
		r := o.(Ranged[float32])
		p, g := make([]float32, 8), make([]float32, 8)
		require.ErrorIs(t, r.StepRange(p, g, 0), ErrStepOrder)
		require.ErrorIs(t, r.EndStep(), ErrStepOrder)
		require.NoError(t, r.BeginStep(8))
		require.ErrorIs(t, r.BeginStep(8), ErrStepOrder)
		err := r.StepRange(p[:4], g[:4], 5)
		require.ErrorIs(t, err, ErrLength)
		require.ErrorContains(t, err, "[5, 9)")
		require.ErrorIs(t, r.StepRange(p[:4], g[:3], 0), ErrLength)
		require.ErrorIs(t, r.StepRange(p[:1], g[:1], -1), ErrLength)
		require.NoError(t, r.StepRange(p, g, 0))
		require.NoError(t, r.EndStep())
		require.Equal(t, int64(1), o.Steps())
		require.ErrorIs(t, r.BeginStep(9), ErrLength)
		require.Equal(t, int64(1), o.Steps())
		// Step after a failed BeginStep still works: nothing was left open.
		require.NoError(t, o.Step(p, g))
		require.True(t, errors.Is(o.Step(p, g[:2]), ErrLength))
	}
}
