package models

import (
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// SkipMLP: a dropped step's gate is 0, so the block's parameters change
// neither the logits nor get a gradient other than zero, and Skips names
// them (nothing with ComputeDropped); a kept step's block does both. The
// gate is read afresh by every run of one machine.
func TestSkipMLP(t *testing.T) {
	_, err := NewSkipMLP(G.NewGraph(), tensor.Float64, 1, SkipMLPConfig{Sizes: []int{4, 3}})
	require.ErrorContains(t, err, "want 3 sizes")
	var m *SkipMLP
	drop := func(step int64, rank int) bool { return step%2 == 1 && rank == 0 }
	ctor := func(g *G.ExprGraph, dt tensor.Dtype, seed int64) (Model, error) {
		var err error
		m, err = NewSkipMLP(g, dt, seed, SkipMLPConfig{Sizes: []int{6, 5, 3}, Drop: drop})
		return m, err
	}
	r := buildRig(t, ctor, tensor.Float64, 3, 4, 6, 3, true)
	x, y, _ := randInputs(tensor.Float64, 9, 4, 6, 3)
	r.bind(t, x, y)
	require.Len(t, r.learn, 6)

	left, err := m.Skips(1, 0)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, left)
	r.run(t)
	dropped := toF64(t, r.logits.Value())
	for _, i := range left {
		for _, g := range toF64(t, r.grads[i].Value()) {
			require.Zero(t, g)
		}
	}
	w1 := f64s(t, r.learn[2])
	for i := range w1 {
		w1[i] += 1
	}
	r.run(t)
	require.Equal(t, dropped, toF64(t, r.logits.Value()), "the dropped block changed the logits")

	left, err = m.Skips(1, 1) // rank 1 keeps it
	require.NoError(t, err)
	require.Empty(t, left)
	r.run(t)
	require.NotEqual(t, dropped, toF64(t, r.logits.Value()))
	nonzero := false
	for _, g := range toF64(t, r.grads[2].Value()) {
		nonzero = nonzero || g != 0
	}
	require.True(t, nonzero, "a kept block has no gradient")

	m.cfg.ComputeDropped = true
	left, err = m.Skips(1, 0)
	require.NoError(t, err)
	require.Empty(t, left)
}
