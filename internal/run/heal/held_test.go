package heal_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/run/heal"
	"github.com/ringddp/ringddp/optim"
)

// heldJoiner is a ZeRO-1 joiner's state before Heal when the re-shard's
// all-gather has given it the parameters already: want's arena, no
// optimizer state (package zero moves it), ParamsHeld.
func heldJoiner(want heal.State[float32]) heal.State[float32] {
	s := fresh[float32](len(want.Params), "")
	copy(s.Params, want.Params)
	s.ParamsHeld = true
	return s
}

// With ParamsHeld on every rank (ZeRO-1: the joiner holds the parameters
// already) the stream leaves the parameters out: heal's bytes drop by
// exactly the parameters' size against the same heal with them in, the
// joiner gets the position and RNG and keeps its own arena, and the
// replica check still covers it: one element of the joiner's arena
// changed fails the heal on every rank, naming the joiner. 3 and 5 ranks,
// one joiner.
func TestHealParamsHeld(t *testing.T) {
	for _, n := range []int{3, 5} {
		want := replica[float32](1001, 0, 37)
		want.Optim = optim.State{}
		senders := func(joiner func() heal.State[float32], held bool) func(int) heal.State[float32] {
			return func(r int) heal.State[float32] {
				if r == 1 {
					return joiner()
				}
				s := want
				s.Params = slices.Clone(want.Params)
				s.ParamsHeld = held
				return s
			}
		}
		sent := healAll(t, n, []int{1}, 10*time.Second, senders(func() heal.State[float32] { return fresh[float32](1001, "") }, false), nil)
		require.NoError(t, allreducetest.FirstError(sent.errs))
		o := healAll(t, n, []int{1}, 10*time.Second, senders(func() heal.State[float32] { return heldJoiner(want) }, true), nil)
		require.NoError(t, allreducetest.FirstError(o.errs))
		require.Equal(t, sent.reports[0].StateBytes-4*1001, o.reports[0].StateBytes, "n=%d: the stream without the parameters", n)
		require.Equal(t, int64(37), o.reports[0].StateBytes, "n=%d: the RNG bytes alone", n)
		for r, rep := range o.reports {
			require.Equal(t, int64(4*1001), rep.HeldBytes, "n=%d: rank %d's report of the bytes left out", n, r)
			require.Zero(t, sent.reports[r].HeldBytes, "n=%d: rank %d, parameters sent", n, r)
		}
		var total int64
		for _, b := range o.reports[0].Sent {
			total += b
		}
		require.Less(t, total, int64(4*1001), "n=%d: the senders sent %v, less than the parameters", n, o.reports[0].Sent)
		got := o.states[1]
		require.Equal(t, want.Params, got.Params, "n=%d: the joiner's own arena, kept", n)
		require.Equal(t, want.Position, got.Position)
		require.Equal(t, want.RNG, got.RNG)

		bad := healAll(t, n, []int{1}, 10*time.Second, senders(func() heal.State[float32] {
			s := heldJoiner(want)
			s.Params[500]++
			return s
		}, true), nil)
		for r, err := range bad.errs {
			require.ErrorContains(t, err, "replica check failed: rank 1's parameters are not bitwise rank 0's", "n=%d, rank %d", n, r)
		}
	}
}

// Senders and a joiner that disagree on ParamsHeld: the joiner refuses the
// header, saying which way, and every other rank names it; nothing is
// loaded.
func TestHealParamsHeldDisagree(t *testing.T) {
	want := replica[float32](99, 0, 3)
	want.Optim = optim.State{}
	for _, c := range []struct {
		name        string
		sendersHeld bool
		joinerWord  string
	}{
		{"senders leave out", true, "the senders' stream leaves the parameters out, this rank's carries the parameters"},
		{"senders carry", false, "the senders' stream carries the parameters, this rank's leaves the parameters out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := healAll(t, 3, []int{2}, 10*time.Second, func(r int) heal.State[float32] {
				if r == 2 {
					s := fresh[float32](99, "")
					s.ParamsHeld = !c.sendersHeld
					return s
				}
				s := want
				s.Params = slices.Clone(want.Params)
				s.ParamsHeld = c.sendersHeld
				return s
			}, nil)
			require.ErrorContains(t, o.errs[2], c.joinerWord)
			for _, r := range []int{0, 1} {
				require.ErrorContains(t, o.errs[r], "rank 2 failed checking the state's header: refused, nothing was loaded", "rank %d", r)
			}
			require.Equal(t, make([]float32, 99), o.states[2].Params, "the joiner loaded nothing")
		})
	}
}
