package trainer

import "fmt"

// Example usage. Every step's global batch is positions [s·B, (s+1)·B) of
// the epoch's permutation, whatever the world size, and rank r of N takes
// positions s·B + r, s·B + r + N, ... of it (the first B mod N ranks one
// more than the others when N does not divide B: split.go). Each step checks that the
// slice this rank fills is exactly that (checkSlice: a world size or rank
// taken wrong after the group changed would fail it), and once the step is
// done counts its global batch in the epoch's usage, which survivors of a
// failure carry over and take from the rank whose state they continue
// from (survive.go). An epoch that used every example it dealt once has
// SamplesUsed == SamplesDistinct == steps × B.

// usage counts how often each training example was used this epoch.
type usage struct {
	count          []int32 // per example
	used, distinct int64
}

func newUsage(n int) usage { return usage{count: make([]int32, n)} }

func (u *usage) reset() {
	clear(u.count)
	u.used, u.distinct = 0, 0
}

// add counts the examples idx.
func (u *usage) add(idx []int) {
	for _, i := range idx {
		if u.count[i] == 0 {
			u.distinct++
		}
		u.count[i]++
		u.used++
	}
}

// recount recomputes used and distinct from count (after count was
// replaced).
func (u *usage) recount() {
	u.used, u.distinct = 0, 0
	for _, c := range u.count {
		u.used += int64(c)
		if c > 0 {
			u.distinct++
		}
	}
}

// checkSlice checks that mine is rank's share of global in a world of
// size ranks: global[rank], global[rank+size], ... (split.go).
func checkSlice(mine, global []int, rank, size int) error {
	if len(mine) != share(len(global), size, rank) {
		return fmt.Errorf("rank %d of %d took %d examples of a global batch of %d", rank, size, len(mine), len(global))
	}
	for k, i := range mine {
		if global[rank+k*size] != i {
			return fmt.Errorf("rank %d of %d took example %d as its %d-th, but the global batch deals it example %d", rank, size, i, k, global[rank+k*size])
		}
	}
	return nil
}
