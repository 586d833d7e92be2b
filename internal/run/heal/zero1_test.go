package heal_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/run/heal"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// zero1Rank wraps mlp-odd over g with ZeRO-1 and buddies.
func zero1Rank(t *testing.T, g *allreduce.Group) *zero.ZeRO1[float64] {
	var z *zero.ZeRO1[float64]
	traintest.Build[float64](t, "mlp-odd", 2, func(params G.Nodes) traintest.Wrapper {
		var err error
		z, err = zero.WrapWithBuddy[float64](context.Background(), g, params, traintest.NewOpt[float64](t, "adam"), traintest.NewOpt[float64](t, "adam"))
		require.NoError(t, err)
		return z
	})
	return z
}

// grad is element i's averaged gradient at step s.
func grad(s, i int) float64 { return math.Sin(float64(7*s+i)) / 10 }

// step trains step s with the gradient grad.
func step(ctx context.Context, z *zero.ZeRO1[float64], s int) error {
	for _, p := range z.Pieces() {
		for i := p.Lo; i < p.Hi; i++ {
			z.GradShard()[p.Off+i-p.Lo] = grad(s, i)
		}
	}
	return z.Step(ctx)
}

// The building blocks together, under ZeRO-1: 3 ranks train 3 steps, a
// fresh rank joins as rank 1 of 4; Heal gives it the parameters, position
// and RNG, zero.Regroup its shard and buddy copy; 2 more steps end bitwise
// as one optimizer over the whole arena.
func TestHealZeRO1Join(t *testing.T) {
	const k, m = 3, 2
	conns, _, err := allreducetest.InprocConns(3, 10*time.Second)
	require.NoError(t, err)
	old := make([]*zero.ZeRO1[float64], 3)
	var start []float64
	require.NoError(t, allreducetest.FirstError(allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		z := zero1Rank(t, g)
		old[g.Rank()] = z
		if g.Rank() == 0 {
			start = append([]float64(nil), z.DDP().ParamArena()...)
		}
		for s := range k {
			if err := step(context.Background(), z, s); err != nil {
				return err
			}
		}
		return nil
	})))

	tr := zero.Transition{OldSize: 3, Old: []int{0, -1, 1, 2}}
	conns, _, err = allreducetest.InprocConns(4, 10*time.Second)
	require.NoError(t, err)
	arenas := make([][]float64, 4)
	states := make([]optim.State, 4)
	healed := make([]heal.State[float64], 4)
	require.NoError(t, allreducetest.FirstError(allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		to := zero1Rank(t, g)
		var from *zero.ZeRO1[float64]
		st := heal.State[float64]{JobID: "job-z", RunID: "run-2", Params: to.DDP().ParamArena(), RNG: []byte{}}
		if s := tr.Old[g.Rank()]; s >= 0 {
			from = old[s]
			copy(st.Params, from.DDP().ParamArena())
			st.Position = heal.Position{Epoch: 0, StepInEpoch: k, GlobalStep: k}
			st.RNG = []byte{1, 2, 3}
		}
		if _, err := heal.Heal(ctx, g, []int{1}, &st); err != nil {
			return err
		}
		healed[g.Rank()] = st
		if err := zero.Regroup(ctx, from, to, tr); err != nil {
			return err
		}
		for s := k; s < k+m; s++ {
			if err := step(ctx, to, s); err != nil {
				return err
			}
		}
		arenas[g.Rank()] = append([]float64(nil), to.DDP().ParamArena()...)
		var err error
		states[g.Rank()], err = to.FullOptimizerState(ctx)
		return err
	})))
	require.Equal(t, heal.Position{StepInEpoch: k, GlobalStep: k}, healed[1].Position)
	require.Equal(t, []byte{1, 2, 3}, healed[1].RNG)

	ref := traintest.NewOpt[float64](t, "adam")
	want := append([]float64(nil), start...)
	for s := range k + m {
		g := make([]float64, len(want))
		for i := range g {
			g[i] = grad(s, i)
		}
		require.NoError(t, ref.Step(want, g))
	}
	for r := range arenas {
		require.Equal(t, want, arenas[r], "rank %d's parameters", r)
		require.Equal(t, ref.State(), states[r], "rank %d's optimizer state", r)
	}
}
