package models

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"
)

func TestArgmaxAndCountCorrect(t *testing.T) {
	data := []float64{
		0.1, 0.9, -1, // 1
		5, 5, 4, // 0 (first on ties)
		-3, -2, -1, // 2
		1e4, -1e4, 1e4 + 1, // 2
	}
	labels := []uint8{1, 1, 2, 0}
	f64 := tensor.New(tensor.WithShape(4, 3), tensor.WithBacking(append([]float64(nil), data...)))
	f32data := make([]float32, len(data))
	for i, v := range data {
		f32data[i] = float32(v)
	}
	f32 := tensor.New(tensor.WithShape(4, 3), tensor.WithBacking(f32data))
	for _, logits := range []tensor.Tensor{f64, f32} {
		pred, err := Argmax(logits)
		require.NoError(t, err)
		assert.Equal(t, []int{1, 0, 2, 2}, pred, "%v", logits.Dtype())
		n, err := CountCorrect(logits, labels)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
	}

	// a non-contiguous view (transpose) is read in logical order.
	tr := tensor.New(tensor.WithShape(3, 2), tensor.WithBacking([]float64{1, 0, 2, 9, 0, 1}))
	require.NoError(t, tr.T())
	pred, err := Argmax(tr) // logical rows: [1 2 0], [0 9 1]
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1}, pred)

	_, err = CountCorrect(f64, labels[:3])
	assert.Error(t, err)
	_, err = Argmax(tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{1, 2, 3})))
	assert.Error(t, err)
	_, err = Argmax(tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]int{1, 2})))
	assert.ErrorContains(t, err, "int")
}

func TestFillOneHot(t *testing.T) {
	d := tensor.New(tensor.WithShape(3, 4), tensor.WithBacking([]float32{
		9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
	}))
	require.NoError(t, FillOneHot(d, []uint8{3, 0, 1}))
	assert.Equal(t, []float32{0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0}, d.Data())

	d64 := tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(2, 2))
	require.NoError(t, FillOneHot(d64, []uint8{1, 1}))
	assert.Equal(t, []float64{0, 1, 0, 1}, d64.Data())

	assert.Error(t, FillOneHot(d64, []uint8{2, 0}), "label out of range")
	assert.Error(t, FillOneHot(d64, []uint8{1}), "batch mismatch")
	assert.Error(t, FillOneHot(tensor.New(tensor.Of(tensor.Int), tensor.WithShape(1, 2)), []uint8{0}))
}
