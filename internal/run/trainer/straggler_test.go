package trainer

import (
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/ddp"
)

// exactTail is P(X >= k) for X ~ Binomial(n, 1/ranks) in exact
// arithmetic, the independent reference of binomialTail: the sum over j
// of C(n, j) (ranks-1)^(n-j), over ranks^n.
func exactTail(k, n, ranks int) float64 {
	sum := new(big.Int)
	for j := k; j <= n; j++ {
		rest := new(big.Int).Exp(big.NewInt(int64(ranks-1)), big.NewInt(int64(n-j)), nil)
		sum.Add(sum, rest.Mul(rest, new(big.Int).Binomial(int64(n), int64(j))))
	}
	all := new(big.Int).Exp(big.NewInt(int64(ranks)), big.NewInt(int64(n)), nil)
	f, _ := new(big.Rat).SetFrac(sum, all).Float64()
	return f
}

func TestBinomialTail(t *testing.T) {
	for _, c := range []struct{ k, n, ranks int }{
		{0, 10, 2}, {1, 10, 2}, {5, 10, 2}, {10, 10, 2}, {3, 3, 2}, {7, 20, 4}, {12, 20, 4},
		{30, 60, 3}, {45, 60, 3}, {120, 400, 4}, {140, 400, 4}, {160, 400, 4}, {40, 300, 8},
	} {
		want := exactTail(c.k, c.n, c.ranks)
		got := binomialTail(c.k, c.n, 1/float64(c.ranks))
		require.InDelta(t, want, got, 1e-9*max(want, 1e-300)+1e-15, "P(X >= %d), n %d, p 1/%d", c.k, c.n, c.ranks)
	}
	require.Equal(t, 0.0, binomialTail(11, 10, 0.5))
	// Large n: no overflow, and a sure tail is 1.
	require.InDelta(t, 1, binomialTail(1, 100000, 0.25), 1e-9)
	require.Less(t, binomialTail(50000, 100000, 0.25), 1e-300)
}

// stampedLast feeds s steps in which rank last of ranks was last in the
// first k and the others in turn in the rest.
func stampedLast(ranks, n, k, last int) *stragglers {
	var s stragglers
	other := 0
	for i := range n {
		r := last
		if i >= k {
			for other%ranks == last {
				other++
			}
			r = other % ranks
			other++
		}
		s.add(ddp.Agreement{Stamped: true, Last: r, Lag: time.Millisecond}, ranks)
	}
	return &s
}

// The slowest rank is named only when it is last significantly more often
// than chance: on 4 ranks, 26% to 35% of 400 steps is not, 60% is; a rank
// last in every step of 2 is named after 10 steps, not after 3.
func TestSlowestRankSignificance(t *testing.T) {
	for pct := 26; pct <= 35; pct++ {
		s := stampedLast(4, 400, 4*pct, 2)
		r, share, _ := s.slowest()
		require.Equal(t, 2, r)
		require.InDelta(t, float64(pct)/100, share, 1e-9)
		r, _, _ = s.significant()
		require.Equal(t, -1, r, "last in %d%% of 400 steps on 4 ranks: named", pct)
	}
	for _, pct := range []int{50, 60, 95} {
		r, share, lag := stampedLast(4, 400, 4*pct, 2).significant()
		require.Equal(t, 2, r, "last in %d%% of 400 steps on 4 ranks: not named", pct)
		require.InDelta(t, float64(pct)/100, share, 1e-9)
		require.Equal(t, time.Millisecond, lag)
	}
	r, _, _ := stampedLast(2, 10, 10, 1).significant()
	require.Equal(t, 1, r)
	r, _, _ = stampedLast(2, 3, 3, 1).significant()
	require.Equal(t, -1, r, "3 steps of 3 on 2 ranks: p 1/8")
	r, _, _ = stampedLast(2, 400, 280, 1).significant()
	require.Equal(t, -1, r, "70% on 2 ranks: below halfway to every step")
	r, _, _ = stampedLast(1, 10, 10, 0).significant()
	require.Equal(t, -1, r, "one rank")
	var none stragglers
	r, _, _ = none.significant()
	require.Equal(t, -1, r)
}

// The hidden communication is the collectives' time inside the step's
// forward and backward pass, and taking it forgets the spans.
func TestCommSpansHidden(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c commSpans
	c.add(at(2), at(5))   // inside: 3
	c.add(at(8), at(14))  // straddles the end at 10: 2
	c.add(at(11), at(12)) // after: 0
	require.Equal(t, 5*time.Millisecond, c.hidden(at(0), at(10)))
	require.Equal(t, time.Duration(0), c.hidden(at(0), at(10)))
	var nilSpans *commSpans
	nilSpans.add(at(0), at(1))
	require.Equal(t, time.Duration(0), nilSpans.hidden(at(0), at(10)))
}
