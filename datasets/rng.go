package datasets

import (
	"math/bits"
	"math/rand/v2"
)

// pcgStream is the fixed second PCG seed word; the first is the user's seed.
const pcgStream = 0x9E3779B97F4A7C15

// rng is a deterministic generator: PCG (whose output math/rand/v2 fixes by
// specification) plus bounded integers and shuffles written here, so that a
// seed gives the same numbers on every platform, rank and Go release — which
// resuming a run from a checkpoint relies on.
type rng struct{ src *rand.PCG }

func newRNG(seed int64) rng { return rng{rand.NewPCG(uint64(seed), pcgStream)} }

// uintN returns a uniform integer in [0, n), n > 0 (Lemire's method, unbiased).
func (r rng) uintN(n uint64) uint64 {
	hi, lo := bits.Mul64(r.src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.src.Uint64(), n)
		}
	}
	return hi
}

// shuffle permutes p uniformly (Fisher–Yates).
func (r rng) shuffle(p []int) {
	for i := len(p) - 1; i > 0; i-- {
		j := int(r.uintN(uint64(i + 1)))
		p[i], p[j] = p[j], p[i]
	}
}

// permutation returns a uniformly random permutation of [0, n) determined by seed.
func permutation(n int, seed int64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	newRNG(seed).shuffle(p)
	return p
}
