package optim

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// encode round-trips s through gob (as a checkpoint would).
func encode(t *testing.T, s State) State {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, gob.NewEncoder(&buf).Encode(s))
	var out State
	require.NoError(t, gob.NewDecoder(&buf).Decode(&out))
	return out
}

func TestStateRoundTripContinuesBitwise(t *testing.T) {
	forBothTypes(t, func(t *testing.T, c optCase, dt string) {
		if dt == DTypeFloat32 {
			roundTrip[float32](t, c)
		} else {
			roundTrip[float64](t, c)
		}
	})
}

func roundTrip[T Float](t *testing.T, c optCase) {
	const n, steps = 29, 6
	init, grads := data(3, n, steps)
	want := conv[T](init)
	o := build[T](t, c)
	for s := 0; s < steps; s++ {
		stepAt(t, o, c, s, want, conv[T](grads[s]))
	}
	wantState := o.State()

	for _, cut := range []int{0, 1, 4} {
		p := conv[T](init)
		a := build[T](t, c)
		for s := 0; s < cut; s++ {
			stepAt(t, a, c, s, p, conv[T](grads[s]))
		}
		st := a.State()
		require.NoError(t, st.Validate())
		require.Equal(t, st, encode(t, st), "gob round trip")

		// Resume two ways: NewFromState, and LoadState into an optimizer
		// built with other hyper-parameters (the state's win).
		b, err := NewFromState[T](encode(t, st))
		require.NoError(t, err)
		other := c
		other.sgd.LR, other.adam.LR = 123, 123
		b2 := build[T](t, other)
		require.NoError(t, b2.LoadState(encode(t, st)))
		require.Equal(t, st, b2.State())
		require.Equal(t, a.StateBytes(), b2.StateBytes())

		p2 := append([]T(nil), p...)
		for s := cut; s < steps; s++ {
			g := conv[T](grads[s])
			stepAt(t, b, c, s, p, g)
			stepAt(t, b2, c, s, p2, g)
		}
		bitsEqual(t, want, p)
		bitsEqual(t, want, p2)
		require.Equal(t, wantState, b.State())
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	o, err := NewAdamW[float32](DefaultAdamWConfig())
	require.NoError(t, err)
	init, grads := data(4, 10, 2)
	p := conv[float32](init)
	for _, g := range grads {
		require.NoError(t, o.Step(p, conv[float32](g)))
	}
	js, err := json.Marshal(o.State())
	require.NoError(t, err)
	var back State
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, o.State(), back)
}

func TestReshard4To3ContinuesBitwise(t *testing.T) {
	forBothTypes(t, func(t *testing.T, c optCase, dt string) {
		for _, n := range []int{103, 2} {
			for _, before := range []int{0, 3} {
				t.Run(fmt.Sprintf("n=%d/before=%d", n, before), func(t *testing.T) {
					if dt == DTypeFloat32 {
						reshard[float32](t, c, n, before)
					} else {
						reshard[float64](t, c, n, before)
					}
				})
			}
		}
	})
}

// reshard runs `before` steps on 4 shards, consolidates their states, re-cuts
// them into 3 shards and runs the remaining steps; the parameters must equal
// an uninterrupted run on the whole arena bitwise.
func reshard[T Float](t *testing.T, c optCase, n, before int) {
	const steps = 6
	init, grads := data(5, n, steps)
	want := conv[T](init)
	o := build[T](t, c)
	for s := 0; s < steps; s++ {
		stepAt(t, o, c, s, want, conv[T](grads[s]))
	}

	p := conv[T](init)
	b4 := bounds(n, 4)
	states := make([]State, 4)
	for i := range states {
		so := build[T](t, c)
		for s := 0; s < before; s++ {
			stepAt(t, so, c, s, p[b4[i]:b4[i+1]], conv[T](grads[s])[b4[i]:b4[i+1]])
		}
		states[i] = encode(t, so.State())
	}
	full, err := ConcatStates(states)
	require.NoError(t, err)
	if before > 0 {
		require.Equal(t, n, full.Len)
	}
	b3 := bounds(n, 3)
	opts := make([]Optimizer[T], 3)
	for i := range opts {
		st, err := SliceState(full, b3[i], b3[i+1])
		require.NoError(t, err)
		opts[i], err = NewFromState[T](st)
		require.NoError(t, err)
	}
	for s := before; s < steps; s++ {
		g := conv[T](grads[s])
		for i, so := range opts {
			stepAt(t, so, c, s, p[b3[i]:b3[i+1]], g[b3[i]:b3[i+1]])
		}
	}
	bitsEqual(t, want, p)

	// The consolidated state of the 3 shards is the uninterrupted state.
	final := make([]State, 3)
	for i, so := range opts {
		final[i] = so.State()
	}
	got, err := ConcatStates(final)
	require.NoError(t, err)
	require.Equal(t, o.State(), got)
}
