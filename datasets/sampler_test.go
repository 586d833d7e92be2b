package datasets

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pytorchIndices transcribes torch.utils.data.DistributedSampler.__iter__
// literally (given the epoch's order, which PyTorch draws from torch.randperm).
func pytorchIndices(order []int, n, replicas, rank int, dropLast bool) []int {
	var numSamples int
	if dropLast && n%replicas != 0 {
		numSamples = int(math.Ceil(float64(n-replicas) / float64(replicas)))
	} else {
		numSamples = int(math.Ceil(float64(n) / float64(replicas)))
	}
	total := numSamples * replicas
	indices := slices.Clone(order)
	if !dropLast {
		padding := total - len(indices)
		if padding <= len(indices) {
			indices = append(indices, indices[:padding]...)
		} else {
			var rep []int
			for range int(math.Ceil(float64(padding) / float64(len(indices)))) {
				rep = append(rep, indices...)
			}
			indices = append(indices, rep[:padding]...)
		}
	} else {
		indices = indices[:total]
	}
	if len(indices) != total {
		panic("reference sampler: wrong total")
	}
	out := []int{}
	for i := rank; i < total; i += replicas {
		out = append(out, indices[i])
	}
	return out
}

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

func TestSamplerMatchesPyTorchRule(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 7, 10, 11, 12, 100, 101} {
		for _, replicas := range []int{1, 2, 3, 4, 7, 8, 13} {
			for _, dropLast := range []bool{false, true} {
				for _, shuffle := range []bool{false, true} {
					for _, epoch := range []int{0, 1, 5} {
						const seed = 11
						order := identity(n)
						if shuffle {
							order = permutation(n, seed+int64(epoch))
						}
						for rank := range replicas {
							s, err := NewDistributedSampler(n, replicas, rank,
								WithShuffle(shuffle), WithSeed(seed), WithDropLast(dropLast))
							require.NoError(t, err)
							s.SetEpoch(epoch)
							want := pytorchIndices(order, n, replicas, rank, dropLast)
							got := s.Indices()
							require.Equal(t, want, got, "n=%d replicas=%d rank=%d dropLast=%v shuffle=%v epoch=%d",
								n, replicas, rank, dropLast, shuffle, epoch)
							require.Equal(t, len(want), s.Len())
							require.Equal(t, s.Len()*replicas, s.TotalSize())
						}
					}
				}
			}
		}
	}
}

// ranksIndices returns the count of each index over all ranks' epoch.
func ranksCounts(t *testing.T, n, replicas, epoch int, opts ...SamplerOption) []int {
	counts := make([]int, n)
	for rank := range replicas {
		s, err := NewDistributedSampler(n, replicas, rank, opts...)
		require.NoError(t, err)
		s.SetEpoch(epoch)
		for _, i := range s.Indices() {
			counts[i]++
		}
	}
	return counts
}

func TestSamplerCoverage(t *testing.T) {
	// Divisible: every index exactly once across ranks.
	for _, c := range ranksCounts(t, 120, 4, 3) {
		assert.Equal(t, 1, c)
	}
	// Padded: 10 over 4 ranks -> 12 slots; every index at least once, two twice.
	counts := ranksCounts(t, 10, 4, 2)
	twice := 0
	for _, c := range counts {
		assert.True(t, c == 1 || c == 2)
		if c == 2 {
			twice++
		}
	}
	assert.Equal(t, 2, twice)
	// Drop-last: 10 over 4 ranks -> 8; no index twice, two missing.
	counts = ranksCounts(t, 10, 4, 2, WithDropLast(true))
	missing := 0
	for _, c := range counts {
		assert.True(t, c == 0 || c == 1)
		if c == 0 {
			missing++
		}
	}
	assert.Equal(t, 2, missing)
}

func TestSamplerOrders(t *testing.T) {
	mk := func(seed int64, epoch int, opts ...SamplerOption) []int {
		s, err := NewDistributedSampler(1000, 3, 1, append([]SamplerOption{WithSeed(seed)}, opts...)...)
		require.NoError(t, err)
		s.SetEpoch(epoch)
		return s.Indices()
	}
	assert.Equal(t, mk(5, 2), mk(5, 2), "same seed and epoch, same order")
	assert.NotEqual(t, mk(5, 2), mk(5, 3), "epochs differ")
	assert.NotEqual(t, mk(5, 2), mk(6, 2), "seeds differ")
	assert.Equal(t, mk(5, 3), mk(6, 2), "seed+epoch, as PyTorch")
	assert.Equal(t, mk(5, 0, WithShuffle(false)), mk(9, 7, WithShuffle(false)), "no shuffle: fixed order")
	assert.Equal(t, []int{1, 4, 7, 10}, mk(0, 0, WithShuffle(false))[:4])

	// SetEpoch changes the order; setting it back restores it.
	s, err := NewDistributedSampler(50, 2, 0)
	require.NoError(t, err)
	e0 := s.Indices()
	s.SetEpoch(1)
	assert.NotEqual(t, e0, s.Indices())
	assert.Equal(t, 1, s.Epoch())
	s.SetEpoch(0)
	assert.Equal(t, e0, s.Indices())
}

// The permutation is pinned so that a change to it (which would break
// resuming a run's data order across versions) is noticed.
func TestPermutationPinned(t *testing.T) {
	assert.Equal(t, []int{0, 9, 2, 5, 1, 8, 3, 7, 6, 4}, permutation(10, 0))
	assert.Equal(t, []int{}, permutation(0, 0))
	p := permutation(1000, 123)
	assert.ElementsMatch(t, identity(1000), p)
}

func TestSamplerBatches(t *testing.T) {
	s, err := NewDistributedSampler(103, 4, 2, WithSeed(9)) // 26 per rank
	require.NoError(t, err)
	s.SetEpoch(4)
	assert.Equal(t, 26, s.Len())
	assert.Equal(t, 3, s.NumBatches(8, true))
	assert.Equal(t, 4, s.NumBatches(8, false))
	var all []int
	for i := range s.NumBatches(8, false) {
		b := s.Batch(i, 8)
		if i < 3 {
			assert.Len(t, b, 8)
		} else {
			assert.Len(t, b, 2)
		}
		all = append(all, b...)
	}
	assert.Equal(t, s.Indices(), all)

	// Resume: a new sampler at (epoch 4, batch 2) gives the same batch.
	r, err := NewDistributedSampler(103, 4, 2, WithSeed(9))
	require.NoError(t, err)
	r.SetEpoch(4)
	assert.Equal(t, s.Batch(2, 8), r.Batch(2, 8))

	// A batch stays valid after SetEpoch.
	b := s.Batch(0, 8)
	saved := slices.Clone(b)
	s.SetEpoch(5)
	_ = s.Batch(0, 8)
	assert.Equal(t, saved, b)

	assert.Panics(t, func() { s.Batch(4, 8) })
	assert.Panics(t, func() { s.Batch(-1, 8) })
	assert.Panics(t, func() { s.Batch(0, 0) })
	assert.Panics(t, func() { s.NumBatches(0, true) })
}

func TestSamplerErrors(t *testing.T) {
	_, err := NewDistributedSampler(10, 0, 0)
	assert.ErrorContains(t, err, "0 replicas, want at least 1")
	_, err = NewDistributedSampler(10, 4, 4)
	assert.ErrorContains(t, err, "rank 4 is out of range [0, 4)")
	_, err = NewDistributedSampler(10, 4, -1)
	assert.ErrorContains(t, err, "rank -1 is out of range")
	_, err = NewDistributedSampler(-1, 4, 0)
	assert.ErrorContains(t, err, "dataset length -1 is negative")
}
