package datasets

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tiny is 3 examples of 2×2 images, 4 classes.
func tiny(t *testing.T) *Dataset {
	t.Helper()
	images := []uint8{
		0, 255, 51, 102, // example 0
		1, 2, 3, 4, // example 1
		255, 255, 0, 0, // example 2
	}
	d, err := NewDataset(images, []uint8{3, 0, 2}, 2, 2, 4)
	require.NoError(t, err)
	return d
}

func TestNewDatasetValidates(t *testing.T) {
	_, err := NewDataset(make([]uint8, 8), []uint8{0, 1, 2}, 2, 2, 10)
	assert.ErrorContains(t, err, "8 image bytes hold 2 images of 2×2 (remainder 0) but there are 3 labels")
	_, err = NewDataset(make([]uint8, 9), []uint8{0, 1}, 2, 2, 10)
	assert.ErrorContains(t, err, "remainder 1")
	_, err = NewDataset(make([]uint8, 8), []uint8{0, 10}, 2, 2, 10)
	assert.ErrorContains(t, err, "label 10 of example 1 is not below the 10 classes")
	_, err = NewDataset(nil, nil, 0, 2, 10)
	assert.ErrorContains(t, err, "image size 0×2")
	_, err = NewDataset(nil, nil, 2, 2, 257)
	assert.ErrorContains(t, err, "257 classes")

	img := &IDX{Dims: []int{2, 2, 2}, Data: make([]byte, 8)}
	_, err = NewDatasetFromIDX(img, &IDX{Dims: []int{3}, Data: make([]byte, 3)}, 10)
	assert.ErrorContains(t, err, "2 images but 3 labels")
	_, err = NewDatasetFromIDX(&IDX{Dims: []int{8}, Data: make([]byte, 8)}, &IDX{Dims: []int{8}, Data: make([]byte, 8)}, 10)
	assert.ErrorContains(t, err, "images IDX has dimensions [8], want 3")
	_, err = NewDatasetFromIDX(img, &IDX{Dims: []int{2, 1}, Data: make([]byte, 2)}, 10)
	assert.ErrorContains(t, err, "labels IDX has dimensions [2 1], want 1")
	d, err := NewDatasetFromIDX(img, &IDX{Dims: []int{2}, Data: []byte{1, 9}}, 10)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Len())
}

func TestDatasetAccessors(t *testing.T) {
	d := tiny(t)
	assert.Equal(t, 3, d.Len())
	assert.Equal(t, 2, d.Rows())
	assert.Equal(t, 2, d.Cols())
	assert.Equal(t, 4, d.Features())
	assert.Equal(t, 4, d.Classes())
	assert.Equal(t, []uint8{1, 2, 3, 4}, d.Image(1))
	assert.Equal(t, 2, d.Label(2))
	assert.Equal(t, []int{1, 0, 1, 1}, d.LabelCounts())
	mean, std := d.Normalization()
	assert.Equal(t, MNISTMean, mean)
	assert.Equal(t, MNISTStd, std)

	s := d.Slice(1, 3)
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, []uint8{255, 255, 0, 0}, s.Image(1))
	assert.Equal(t, 2, s.Label(1))
	assert.Panics(t, func() { d.Slice(2, 4) })
}

func TestFillBatch(t *testing.T) {
	d := tiny(t)
	idx := []int{2, 0, 2}
	x := make([]float32, 3*4)
	y := make([]float32, 3*4)
	for i := range y {
		y[i] = 7 // must be overwritten
	}
	require.NoError(t, d.FillBatch(idx, x, y))
	norm := func(p float64) float32 { return float32((p/255 - 0.1307) / 0.3081) }
	want := []float32{
		norm(255), norm(255), norm(0), norm(0),
		norm(0), norm(255), norm(51), norm(102),
		norm(255), norm(255), norm(0), norm(0),
	}
	assert.InDeltaSlice(t, want, x, 1e-6)
	assert.Equal(t, []float32{
		0, 0, 1, 0,
		0, 0, 0, 1,
		0, 0, 1, 0,
	}, y)

	// Unnormalised: plain [0,1]; float64 twin.
	raw := d.WithNormalization(0, 1)
	x64 := make([]float64, 4)
	y64 := make([]float64, 4)
	require.NoError(t, raw.FillBatch64([]int{0}, x64, y64))
	assert.InDeltaSlice(t, []float64{0, 1, 0.2, 0.4}, x64, 1e-12)
	assert.Equal(t, []float64{0, 0, 0, 1}, y64)
	mean, _ := d.Normalization()
	assert.Equal(t, MNISTMean, mean, "WithNormalization does not change the original")

	// nil skips.
	require.NoError(t, raw.FillBatch64([]int{1}, nil, y64))
	assert.Equal(t, []float64{1, 0, 0, 0}, y64)
	require.NoError(t, raw.FillBatch([]int{1}, make([]float32, 4), nil))
}

func TestFillBatchErrorsWriteNothing(t *testing.T) {
	d := tiny(t)
	x := make([]float32, 8)
	y := make([]float32, 8)
	assert.ErrorContains(t, d.FillBatch([]int{0, 3}, x, y), "indices[1] = 3 is out of range [0, 3)")
	assert.ErrorContains(t, d.FillBatch([]int{0, -1}, x, y), "indices[1] = -1")
	assert.Equal(t, make([]float32, 8), x, "nothing written on error")
	assert.Equal(t, make([]float32, 8), y)
	assert.ErrorContains(t, d.FillBatch([]int{0}, x, nil), "x has 8 values, want 4 (1 examples × 4 features)")
	assert.ErrorContains(t, d.FillBatch([]int{0}, nil, y), "yOneHot has 8 values, want 4 (1 examples × 4 classes)")
	assert.Panics(t, func() { d.WithNormalization(0, 0) })
}

func TestFillBatchAllocatesNothing(t *testing.T) {
	d := Synthetic(256, 28, 28, 10, 1)
	idx := make([]int, 64)
	for i := range idx {
		idx[i] = (i * 37) % d.Len()
	}
	x := make([]float32, 64*d.Features())
	y := make([]float32, 64*d.Classes())
	x64 := make([]float64, 64*d.Features())
	y64 := make([]float64, 64*d.Classes())
	assert.Zero(t, testing.AllocsPerRun(20, func() { _ = d.FillBatch(idx, x, y) }))
	assert.Zero(t, testing.AllocsPerRun(20, func() { _ = d.FillBatch64(idx, x64, y64) }))
}

func BenchmarkFillBatch(b *testing.B) {
	d := Synthetic(1024, 28, 28, 10, 1)
	idx := make([]int, 128)
	for i := range idx {
		idx[i] = (i * 37) % d.Len()
	}
	x := make([]float32, 128*d.Features())
	y := make([]float32, 128*d.Classes())
	b.SetBytes(int64(len(x) * 4))
	for b.Loop() {
		_ = d.FillBatch(idx, x, y)
	}
}
