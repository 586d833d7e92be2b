package trainer

import (
	"slices"
	"time"

	"github.com/ringddp/ringddp/ddp"
)

// stragglers counts, over an epoch's steps, which rank handed in its last
// gradient bucket last and by how much (ddp.WithArrivalStamps: the stamps
// ride with the agreement, so every rank counts the same).
type stragglers struct {
	last  []int             // by rank: steps in which it was last
	lags  [][]time.Duration // by rank: its lag behind the rank before it in those steps
	steps int               // steps with stamps
}

func (s *stragglers) add(a ddp.Agreement, ranks int) {
	if !a.Stamped || a.Last < 0 || a.Last >= ranks {
		return
	}
	if s.last == nil {
		s.last = make([]int, ranks)
		s.lags = make([][]time.Duration, ranks)
	}
	s.steps++
	s.last[a.Last]++
	s.lags[a.Last] = append(s.lags[a.Last], a.Lag)
}

// Slowest is the rank most often last (the lowest on a tie), the share of
// the steps it was last in, and its median lag in those steps; -1 when no
// step was stamped or there is one rank.
func (s *stragglers) slowest() (rank int, share float64, lag time.Duration) {
	if s.steps == 0 || len(s.last) < 2 {
		return -1, 0, 0
	}
	rank = 0
	for r, c := range s.last {
		if c > s.last[rank] {
			rank = r
		}
	}
	return rank, float64(s.last[rank]) / float64(s.steps), median(s.lags[rank])
}

// median of ds (the lower middle of an even count); 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[(len(c)-1)/2]
}
