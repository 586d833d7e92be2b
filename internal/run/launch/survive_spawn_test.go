package launch

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The spares' replenishing rule (survive_spawn.go), on a coordinator with
// a spawn that records what it starts: a grow that took spares starts as
// many new ones as the waiting count lacks, at most one per rank lost, on
// the cores after the spares'; a plan that took no one in, or a spare still
// waiting, starts none.
func TestReplenishSpares(t *testing.T) {
	type started struct{ name, local int }
	newSurvival := func(spares int, members []int, waiting ...int) (*survival, func() []started) {
		var mu sync.Mutex
		var got []started
		s := &survival{e: &Elastic{Continue: true, Heal: true, Spares: spares}, errOut: io.Discard, prog: newProgress(),
			world: 4, members: members, joiners: map[int]*joiner{}, pids: map[int]int{}, ready: make(chan int, maxJoiners), names: spares}
		for _, n := range waiting {
			s.joiners[n] = &joiner{name: n}
		}
		s.spawn = func(name, local int) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, started{name, local})
			return 1000 + name, nil
		}
		return s, func() []started {
			s.reports.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no step boundary to wait for, no join key to watch

	// Rank 2 lost (generation 1), spare 4 taken in (generation 2): spare 5
	// starts, on local rank 1 (the first spare had local rank 0).
	s, got := newSurvival(1, []int{0, 1, 3, 4})
	s.replenish(ctx, genPlan{Gen: 1, Members: []int{0, 1, 3}}, []LostRank{{Rank: 2}})
	s.replenish(ctx, genPlan{Gen: 2, Members: []int{0, 1, 3, 4}, Joined: []int{4}}, nil)
	require.Equal(t, []started{{5, 1}}, got())

	// Two lost at once and both spares taken in one grow: two new spares.
	s, got = newSurvival(2, []int{0, 3, 4, 5})
	s.replenish(ctx, genPlan{Gen: 1, Members: []int{0, 3, 4, 5}, Joined: []int{4, 5}}, []LostRank{{Rank: 1}, {Rank: 2}})
	require.Equal(t, []started{{6, 2}, {7, 3}}, got())

	// A grow with no rank lost in the attempt (cannot happen: the bound).
	s, got = newSurvival(1, []int{0, 1, 2, 4})
	s.replenish(ctx, genPlan{Gen: 1, Members: []int{0, 1, 2, 4}, Joined: []int{4}}, nil)
	require.Empty(t, got())

	// A joiner still waiting beyond the places lacking (a replacement
	// started before the spare was taken): it is the spare now; none starts.
	s, got = newSurvival(1, []int{0, 1, 3, 4}, 5)
	s.replenish(ctx, genPlan{Gen: 2, Members: []int{0, 1, 3, 4}, Joined: []int{4}}, []LostRank{{Rank: 2}})
	require.Empty(t, got())

	// A loss that took no one in (the group is smaller now): none starts
	// yet; -heal's refill fills the place.
	s, got = newSurvival(1, []int{0, 1, 3}, 4)
	s.replenish(ctx, genPlan{Gen: 1, Members: []int{0, 1, 3}}, []LostRank{{Rank: 2}})
	require.Empty(t, got())
}
