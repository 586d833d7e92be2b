package trainer

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/datasets"
)

// Every rank's slice of a step, under any world size, is its share of the
// one-replica sampler's global batch: the rule survivors re-split by.
func TestSlicesAreTheGlobalBatchs(t *testing.T) {
	const n, batch = 103, 12
	whole, err := datasets.NewDistributedSampler(n, 1, 0, datasets.WithSeed(5), datasets.WithShuffle(true), datasets.WithDropLast(true))
	require.NoError(t, err)
	whole.SetEpoch(2)
	for _, world := range []int{1, 2, 3, 4, 6} {
		u := newUsage(n)
		for r := range world {
			s, err := datasets.NewDistributedSampler(n, world, r, datasets.WithSeed(5), datasets.WithShuffle(true), datasets.WithDropLast(true))
			require.NoError(t, err)
			s.SetEpoch(2)
			for step := range n / batch {
				mine := s.Batch(step, batch/world)
				require.NoError(t, checkSlice(mine, whole.Batch(step, batch), r, world), "world %d rank %d step %d", world, r, step)
				u.add(mine)
			}
		}
		require.Equal(t, int64(n/batch*batch), u.used)
		require.Equal(t, u.used, u.distinct, "world %d: an example used twice", world)
	}
}

func TestCheckSliceRejects(t *testing.T) {
	global := []int{10, 11, 12, 13}
	require.NoError(t, checkSlice([]int{11, 13}, global, 1, 2))
	require.ErrorContains(t, checkSlice([]int{11, 12}, global, 1, 2), "took example 12")
	require.ErrorContains(t, checkSlice([]int{11}, global, 1, 2), "took 1 examples")
}

func TestUsageRecount(t *testing.T) {
	u := newUsage(5)
	u.add([]int{1, 2, 2})
	require.Equal(t, int64(3), u.used)
	require.Equal(t, int64(2), u.distinct)
	u.count = []int32{0, 1, 3, 0, 1}
	u.recount()
	require.Equal(t, int64(5), u.used)
	require.Equal(t, int64(3), u.distinct)
	u.reset()
	require.Equal(t, int64(0), u.used+u.distinct)
}

// The state survivors take is the most advanced member's, an epoch end
// redone rather than skipped, the lowest rank among equals.
func TestPickSource(t *testing.T) {
	for _, c := range []struct {
		name string
		all  []int64
		want int
	}{
		{"all equal", []int64{8, 0, 8, 8, 0, 8, 8, 0, 8}, 0},
		{"one finished the step", []int64{8, 0, 8, 9, 0, 9, 8, 0, 8}, 1},
		{"two finished it", []int64{8, 0, 8, 9, 0, 9, 9, 0, 9}, 1},
		{"one closed the epoch", []int64{16, 1, 0, 16, 0, 16, 16, 1, 0}, 1},
		{"alone", []int64{3, 0, 3}, 0},
	} {
		require.Equal(t, c.want, pickSource(c.all), c.name)
	}
}
