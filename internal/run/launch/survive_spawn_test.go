package launch

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The spares' replenishing rule (survive_spawn.go), on a coordinator with
// a spawn that records what it starts: a grow that took spares starts as
// many new ones as the waiting count lacks, at most one per rank lost, on
// the cores after the spares'; a plan that took no one in, or a spare still
// waiting, starts none.
func TestReplenishSpares(t *testing.T) {
	type started struct{ name, local int }
	// replenish runs the rule on a coordinator of 4 ranks holding spares
	// spares, members members and joiners waiting, after plan p that lost
	// lost (earlier), and returns the spares it started. The status pipe
	// reports a step every millisecond (the step boundary the new spares
	// wait for); the spawn records each start and ends the attempt's
	// context (there is no store whose join keys to watch).
	replenish := func(spares int, members []int, waiting []int, plans []genPlan, lost [][]LostRank) []started {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
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
			cancel()
			return 1000 + name, nil
		}
		pr, pw := io.Pipe()
		go s.prog.read(pr)
		go func() {
			for i := 0; ctx.Err() == nil; i++ {
				fmt.Fprintf(pw, "step %d\n", i)
				time.Sleep(time.Millisecond)
			}
			pw.Close()
		}()
		for i, p := range plans {
			s.replenish(ctx, p, lost[i])
		}
		s.reports.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}

	// Rank 2 lost (generation 1), spare 4 taken in (generation 2): spare 5
	// starts, on local rank 1 (the first spare had local rank 0).
	got := replenish(1, []int{0, 1, 3, 4}, nil,
		[]genPlan{{Gen: 1, Members: []int{0, 1, 3}}, {Gen: 2, Members: []int{0, 1, 3, 4}, Joined: []int{4}}},
		[][]LostRank{{{Rank: 2}}, nil})
	require.Equal(t, []started{{5, 1}}, got)

	// Two lost at once and both spares taken in one grow: two new spares.
	got = replenish(2, []int{0, 3, 4, 5}, nil,
		[]genPlan{{Gen: 1, Members: []int{0, 3, 4, 5}, Joined: []int{4, 5}}}, [][]LostRank{{{Rank: 1}, {Rank: 2}}})
	require.Equal(t, []started{{6, 2}, {7, 3}}, got)

	// A grow with no rank lost in the attempt (cannot happen: the bound).
	got = replenish(1, []int{0, 1, 2, 4}, nil,
		[]genPlan{{Gen: 1, Members: []int{0, 1, 2, 4}, Joined: []int{4}}}, [][]LostRank{nil})
	require.Empty(t, got)

	// A joiner still waiting beyond the places lacking (a replacement
	// started before the spare was taken): it is the spare now; none starts.
	got = replenish(1, []int{0, 1, 3, 4}, []int{5},
		[]genPlan{{Gen: 2, Members: []int{0, 1, 3, 4}, Joined: []int{4}}}, [][]LostRank{{{Rank: 2}}})
	require.Empty(t, got)

	// A loss that took no one in (the group is smaller now): none starts
	// yet; -heal's refill fills the place.
	got = replenish(1, []int{0, 1, 3}, []int{4},
		[]genPlan{{Gen: 1, Members: []int{0, 1, 3}}}, [][]LostRank{{{Rank: 2}}})
	require.Empty(t, got)
}

// A spare due after the attempt has ended is not started.
func TestReplenishAfterTheEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	started := 0
	s := &survival{e: &Elastic{Continue: true, Heal: true, Spares: 1}, errOut: io.Discard, prog: newProgress(),
		world: 4, members: []int{0, 1, 3, 4}, joiners: map[int]*joiner{}, pids: map[int]int{}, names: 1,
		spawn: func(int, int) (int, error) { started++; return 1, nil }}
	s.replenish(ctx, genPlan{Gen: 2, Members: []int{0, 1, 3, 4}, Joined: []int{4}}, []LostRank{{Rank: 2}})
	s.reports.Wait()
	require.Zero(t, started)
}
