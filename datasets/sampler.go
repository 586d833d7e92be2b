package datasets

import (
	"fmt"
	"slices"
)

// DistributedSampler splits a dataset's indices among replicas (ranks) the
// way PyTorch's torch.utils.data.DistributedSampler does, so that each rank
// trains on its own part of every epoch:
//
//  1. the indices 0..n-1, shuffled by a permutation seeded with seed+epoch
//     (the same on every rank) unless shuffling is off;
//  2. without drop-last, padded by wrapping around to the start until the
//     total divides evenly by the replicas; with drop-last and n not
//     divisible, the tail cut to floor(n/replicas)*replicas instead;
//  3. rank r takes every replicas-th index starting at r.
//
// Every rank thus gets Len() indices, the same count. The permutation is
// PyTorch's rule but not its generator, so the orders differ from PyTorch's.
//
// A position in training is (epoch, batch): SetEpoch(e) then Batch(i, size)
// resumes exactly where a run left off. A sampler is not safe for
// concurrent use; each rank has its own.
type DistributedSampler struct {
	n, replicas, rank int
	shuffle, dropLast bool
	seed              int64
	epoch             int
	numSamples        int
	indices           []int // this rank's indices for epoch; nil until needed
}

// SamplerOption configures a DistributedSampler.
type SamplerOption func(*DistributedSampler)

// WithShuffle turns per-epoch shuffling on (the default) or off.
func WithShuffle(on bool) SamplerOption { return func(s *DistributedSampler) { s.shuffle = on } }

// WithSeed sets the shuffling seed (default 0); it must be the same on every rank.
func WithSeed(seed int64) SamplerOption { return func(s *DistributedSampler) { s.seed = seed } }

// WithDropLast drops the tail that does not divide evenly among the
// replicas instead of padding (default false: pad).
func WithDropLast(on bool) SamplerOption { return func(s *DistributedSampler) { s.dropLast = on } }

// NewDistributedSampler returns rank's sampler over a dataset of datasetLen
// examples split among replicas ranks, at epoch 0.
func NewDistributedSampler(datasetLen, replicas, rank int, opts ...SamplerOption) (*DistributedSampler, error) {
	switch {
	case datasetLen < 0:
		return nil, fmt.Errorf("datasets: DistributedSampler: dataset length %d is negative", datasetLen)
	case replicas < 1:
		return nil, fmt.Errorf("datasets: DistributedSampler: %d replicas, want at least 1", replicas)
	case rank < 0 || rank >= replicas:
		return nil, fmt.Errorf("datasets: DistributedSampler: rank %d is out of range [0, %d)", rank, replicas)
	}
	s := &DistributedSampler{n: datasetLen, replicas: replicas, rank: rank, shuffle: true}
	for _, o := range opts {
		o(s)
	}
	if s.dropLast && s.n%replicas != 0 {
		s.numSamples = s.n / replicas // PyTorch: ceil((n - replicas) / replicas)
	} else {
		s.numSamples = (s.n + replicas - 1) / replicas
	}
	return s, nil
}

// SetEpoch sets the epoch whose order the sampler gives; call it at the start
// of every epoch (with the same value on every rank), or the order repeats.
func (s *DistributedSampler) SetEpoch(epoch int) {
	if epoch != s.epoch {
		s.epoch, s.indices = epoch, nil
	}
}

// Epoch returns the current epoch.
func (s *DistributedSampler) Epoch() int { return s.epoch }

// Rank returns the rank this sampler serves.
func (s *DistributedSampler) Rank() int { return s.rank }

// Replicas returns the number of ranks.
func (s *DistributedSampler) Replicas() int { return s.replicas }

// Len returns the number of indices each rank gets per epoch.
func (s *DistributedSampler) Len() int { return s.numSamples }

// TotalSize returns the indices all ranks get per epoch, Len()*Replicas().
func (s *DistributedSampler) TotalSize() int { return s.numSamples * s.replicas }

// Indices returns a copy of this rank's indices for the current epoch.
func (s *DistributedSampler) Indices() []int { return slices.Clone(s.epochIndices()) }

// NumBatches returns the number of batches of batchSize this rank has per
// epoch: only full ones if dropLast, else also a final shorter one. Every
// rank gets the same number. It panics if batchSize < 1.
func (s *DistributedSampler) NumBatches(batchSize int, dropLast bool) int {
	if batchSize < 1 {
		panic(fmt.Sprintf("datasets: DistributedSampler: batch size %d, want at least 1", batchSize))
	}
	if dropLast {
		return s.numSamples / batchSize
	}
	return (s.numSamples + batchSize - 1) / batchSize
}

// Batch returns the i-th batch of batchSize indices of this rank's current
// epoch, [i*batchSize, (i+1)*batchSize) of Indices(), shorter if it is the
// last. The slice is read-only and stays valid (a later SetEpoch does not
// change it). It panics if batchSize < 1 or the batch starts past the end.
func (s *DistributedSampler) Batch(i, batchSize int) []int {
	if batchSize < 1 || i < 0 || i >= s.NumBatches(batchSize, false) {
		panic(fmt.Sprintf("datasets: DistributedSampler: Batch(%d, %d) of %d indices", i, batchSize, s.numSamples))
	}
	idx := s.epochIndices()
	lo, hi := i*batchSize, min((i+1)*batchSize, len(idx))
	return idx[lo:hi:hi]
}

// epochIndices computes (once per epoch) this rank's indices.
func (s *DistributedSampler) epochIndices() []int {
	if s.indices != nil {
		return s.indices
	}
	var order []int
	if s.shuffle {
		order = permutation(s.n, s.seed+int64(s.epoch))
	}
	idx := make([]int, s.numSamples)
	for j := range idx {
		k := (s.rank + j*s.replicas) % s.n // position in the padded order: wraps around
		if order != nil {
			idx[j] = order[k]
		} else {
			idx[j] = k
		}
	}
	s.indices = idx
	return idx
}
