package zero_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// The group grows back under ZeRO-1: the old world's step k was cut short
// (some members had updated their shard, others had not), and a joiner
// comes in, alone or in a lost rank's place. The members Recover, the
// joiner RecoverJoin (its arena NaN: the parameters must arrive),
// CheckShards verifies every moved segment, and every rank trains on
// bitwise as one optimizer over the whole arena. Under -race (over 2 s
// for all four) only the first and third run: a joiner last, and one in a
// lost rank's place.
func TestHealRecoverJoin(t *testing.T) {
	for i, c := range []struct {
		failCase
		old []int
	}{
		{failCase{lossCase{opt: "adam", n: 3, k: 3, m: 2}, []int{0, 1}}, []int{0, 1, 2, -1}},
		{failCase{lossCase{opt: "sgd", n: 3, k: 0, m: 2}, []int{2}}, []int{-1, 0, 1, 2}}, // in the first step
		{failCase{lossCase{opt: "adamw", n: 4, k: 2, m: 2, lost: []int{2}}, []int{0, 3}}, []int{0, 1, -1, 3}},
		{failCase{lossCase{opt: "adam", n: 2, k: 2, m: 2}, nil}, []int{0, -1, 1, -1}},
	} {
		if raceEnabled && i%2 == 1 {
			continue
		}
		t.Run(fmt.Sprintf("%s/n=%d/new=%v", c.opt, c.n, c.old), func(t *testing.T) {
			arenas, states, start, err := growWorld(t, c.failCase, zero.Transition{OldSize: c.n, Old: c.old}, nil)
			require.NoError(t, err)
			want, wantState := wholeArena(t, c.opt, start, c.k+c.m)
			for r := range arenas {
				require.Equal(t, want, arenas[r], "rank %d's parameters", r)
				require.Equal(t, wantState, states[r], "rank %d's optimizer state", r)
			}
		})
	}
}

// A moved segment damaged (one element of the joiner's shard, or of a
// member's buddy copy, changed after the move): CheckShards fails on every
// rank, naming the rank, the shard and the holder.
func TestHealCheckShardsCatchesDamage(t *testing.T) {
	c := failCase{lossCase{opt: "adam", n: 3, k: 2, m: 0}, []int{1}}
	tr := zero.Transition{OldSize: 3, Old: []int{0, 1, 2, -1}}
	for _, victim := range []int{3, 0} { // the joiner's shard; rank 0's copy of rank 3's
		t.Run(fmt.Sprintf("rank=%d", victim), func(t *testing.T) {
			_, _, _, err := growWorld(t, c, tr, func(to *zero.ZeRO1[float64]) {
				if to.DDP().Group().Rank() != victim {
					return
				}
				opt := to.Optimizer()
				if victim == 0 {
					opt = zero.BuddyShadow(to)
				}
				st := opt.State()
				st.Buffers[1].Data[len(st.Buffers[1].Data)/2] += 1e-9
				require.NoError(t, opt.LoadState(st))
			})
			what := "optimizer shard"
			if victim == 0 {
				what = "copy of rank 3's optimizer shard"
			}
			require.ErrorContains(t, err, fmt.Sprintf("rank %d's %s (bucket", victim, what))
			require.ErrorContains(t, err, "failed its SHA-256 check")
			t.Log(err)
		})
	}
}

// growWorld cuts the old world's step k short (failMidStep), then runs the
// world of tr: members Recover, joiners RecoverJoin from a NaN arena,
// damage (if set) on every rank, CheckShards, and c.m steps from k. It
// returns every rank's arena and full optimizer state, the arena at the
// start, and the first error.
func growWorld(t *testing.T, c failCase, tr zero.Transition, damage func(to *zero.ZeRO1[float64])) ([][]float64, []optim.State, []float64, error) {
	kept, start := failMidStep(t, c)
	old := make([]*zero.ZeRO1[float64], c.n)
	for s, k := range kept {
		if k != nil {
			old[s] = k.Wrapper()
		}
	}
	arenas, states, err := newWorld(t, c.lossCase, old, tr, func(ctx context.Context, from, to *zero.ZeRO1[float64]) error {
		arena := to.DDP().ParamArena()
		for i := range arena {
			arena[i] = math.NaN()
		}
		var err error
		if from == nil {
			err = zero.RecoverJoin(ctx, to, tr)
		} else {
			err = zero.Recover(ctx, kept[from.DDP().Group().Rank()], to, tr, int64(c.k))
		}
		if err != nil {
			return err
		}
		if damage != nil {
			damage(to)
		}
		return zero.CheckShards(ctx, from, to, tr)
	})
	return arenas, states, start, err
}
