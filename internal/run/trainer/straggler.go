package trainer

import (
	"math"
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
	if len(s.last) < ranks { // the first step, or the group grew back (survive_heal.go)
		s.last = append(s.last, make([]int, ranks-len(s.last))...)
		s.lags = append(s.lags, make([][]time.Duration, ranks-len(s.lags))...)
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

// The slowest rank is named only when it was last significantly more
// often than chance, 1/N of the steps on N ranks, by two tests:
//
//  1. a one-sided binomial test: the probability that a rank last with
//     chance 1/N in each of the n steps is last in at least as many as this
//     one was is below significanceLevel;
//  2. it was last at least twice as often as chance, 2/N of the steps, or,
//     on 2 and 3 ranks, where 2/N leaves no or little room, halfway from
//     chance to every step, (1+1/N)/2.
//
// The second guards against what the first assumes: steps are not
// independent trials. A rank the scheduler keeps off a core stays last for
// a run of steps, so with more ranks than free cores a rank of 4 can be
// last in a third of the steps by scheduling alone, which the binomial
// test alone would call significant.
const significanceLevel = 0.01

// significant is slowest when the slowest rank passes both tests, else -1.
func (s *stragglers) significant() (rank int, share float64, lag time.Duration) {
	rank, share, lag = s.slowest()
	if rank < 0 || !aboveChance(s.last[rank], s.steps, len(s.last)) {
		return -1, 0, 0
	}
	return rank, share, lag
}

// aboveChance reports whether a rank last in k of n steps on ranks ranks
// passes both tests.
func aboveChance(k, n, ranks int) bool {
	if ranks < 2 || n <= 0 {
		return false
	}
	chance := 1 / float64(ranks)
	least := min(2*chance, (1+chance)/2)
	return float64(k) >= least*float64(n) && binomialTail(k, n, chance) < significanceLevel
}

// binomialTail is P(X >= k) for X ~ Binomial(n, p), 0 < p < 1: the sum of
// the terms C(n, j) p^j (1-p)^(n-j) for j from k to n, each computed from
// logarithms (math.Lgamma), so that large n neither overflows nor
// underflows the binomial coefficients.
func binomialTail(k, n int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if k > n {
		return 0
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	lp, lq := math.Log(p), math.Log1p(-p)
	sum := 0.0
	for j := k; j <= n; j++ {
		lj, _ := math.Lgamma(float64(j + 1))
		lr, _ := math.Lgamma(float64(n - j + 1))
		sum += math.Exp(lgN - lj - lr + float64(j)*lp + float64(n-j)*lq)
	}
	return min(1, sum)
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
