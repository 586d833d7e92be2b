package datasets

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyntheticDeterministicAndBalanced(t *testing.T) {
	a := Synthetic(1003, 8, 8, 10, 42)
	b := Synthetic(1003, 8, 8, 10, 42)
	c := Synthetic(1003, 8, 8, 10, 43)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a.images, c.images)
	assert.Equal(t, 1003, a.Len())
	assert.Equal(t, 64, a.Features())
	assert.Equal(t, 10, a.Classes())
	for _, n := range a.LabelCounts() {
		assert.True(t, n == 100 || n == 101, "class counts %v", a.LabelCounts())
	}
	// Shuffled, not 0,1,2,...
	inOrder := 0
	for i := range 100 {
		if a.Label(i) == i%10 {
			inOrder++
		}
	}
	assert.Less(t, inOrder, 50)
	// Stable across Go releases and platforms: pin a few values.
	assert.Equal(t, []int{7, 5, 7, 4, 3}, []int{a.Label(0), a.Label(1), a.Label(2), a.Label(3), a.Label(4)})
	sum := 0
	for i, p := range a.images {
		sum += int(p) * (i%7 + 1)
	}
	assert.Equal(t, 18220976, sum)

	assert.Equal(t, 0, Synthetic(0, 2, 2, 3, 1).Len())
	assert.Panics(t, func() { Synthetic(-1, 2, 2, 3, 1) })
	assert.Panics(t, func() { Synthetic(1, 2, 2, 300, 1) })
}

// TestSyntheticLearnable trains a softmax regression on a train split for a
// few epochs of plain SGD and checks it nearly always predicts the held-out
// split right: the dataset is what a quick model test needs.
func TestSyntheticLearnable(t *testing.T) {
	const rows, cols, classes, nTrain, nTest = 8, 8, 10, 2000, 500
	all := Synthetic(nTrain+nTest, rows, cols, classes, 7)
	train, test := all.Slice(0, nTrain), all.Slice(nTrain, nTrain+nTest)
	f := train.Features()

	w := make([]float64, f*classes)
	bias := make([]float64, classes)
	x := make([]float64, f)
	y := make([]float64, classes)
	logits := make([]float64, classes)
	forward := func() {
		for c := range classes {
			s := bias[c]
			for j := range f {
				s += w[j*classes+c] * x[j]
			}
			logits[c] = s
		}
		mx := math.Inf(-1)
		for _, v := range logits {
			mx = math.Max(mx, v)
		}
		sum := 0.0
		for c, v := range logits {
			logits[c] = math.Exp(v - mx)
			sum += logits[c]
		}
		for c := range logits {
			logits[c] /= sum
		}
	}
	s, err := NewDistributedSampler(nTrain, 1, 0, WithSeed(3))
	require.NoError(t, err)
	for epoch := range 2 {
		s.SetEpoch(epoch)
		for _, i := range s.Batch(0, nTrain) {
			require.NoError(t, train.FillBatch64([]int{i}, x, y))
			forward()
			for c := range classes {
				g := 0.05 * (logits[c] - y[c])
				bias[c] -= g
				for j := range f {
					w[j*classes+c] -= g * x[j]
				}
			}
		}
	}
	correct := 0
	for i := range test.Len() {
		require.NoError(t, test.FillBatch64([]int{i}, x, nil))
		forward()
		best := 0
		for c := range classes {
			if logits[c] > logits[best] {
				best = c
			}
		}
		if best == test.Label(i) {
			correct++
		}
	}
	acc := float64(correct) / float64(test.Len())
	t.Logf("held-out accuracy after 2 epochs: %.3f", acc)
	assert.Greater(t, acc, 0.95)
}
