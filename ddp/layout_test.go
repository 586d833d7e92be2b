package ddp

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Buckets tile the arena in order, hold whole parameters laid out in
// reverse creation order, and respect the limits unless a single parameter
// exceeds them.
func TestPlanLayoutProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		sizes := make([]int, rng.IntN(12)+1)
		for i := range sizes {
			sizes[i] = rng.IntN(50)
		}
		first, rest := rng.IntN(60)+1, rng.IntN(120)+1
		slots, buckets, err := planLayout(sizes, first, rest)
		require.NoError(t, err)
		off := 0
		for k := len(sizes) - 1; k >= 0; k-- {
			require.Equal(t, off, slots[k].offset, "reverse creation order")
			require.Equal(t, sizes[k], slots[k].size)
			b := buckets[slots[k].bucket]
			require.True(t, b.lo <= off && off+sizes[k] <= b.hi, "parameter inside its bucket")
			off += sizes[k]
		}
		require.Equal(t, 0, buckets[0].lo)
		require.Equal(t, off, buckets[len(buckets)-1].hi)
		params := 0
		for i, b := range buckets {
			if i > 0 {
				require.Equal(t, buckets[i-1].hi, b.lo, "buckets tile the arena")
			}
			limit := rest
			if i == 0 {
				limit = first
			}
			if b.params > 1 {
				require.LessOrEqual(t, b.hi-b.lo, limit, "bucket %d over its limit", i)
			}
			params += b.params
		}
		require.Equal(t, len(sizes), params)
	}
	_, _, err := planLayout([]int{1}, 0, 1)
	require.Error(t, err)
}
