package zero_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// The buddy tests drive Step with a given averaged gradient (written into
// GradShard, as the reduce-scatter would leave it), so that the reference
// is independent of the collectives: one optimizer over the whole arena,
// fed the same gradients. The optimizers are elementwise, so a run whose
// state is sharded, copied, rebuilt and re-sharded must end bitwise equal
// to it.

// buddyBuckets cuts mlp-odd's 5,575 float64 parameters into several
// buckets of uneven length.
var buddyBuckets = ddp.WithBucketBytes(8*1000, 8*2000)

// globalGrad is the averaged gradient of step s over an arena of total
// elements.
func globalGrad(s, total int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(s), 7))
	g := make([]float64, total)
	for i := range g {
		g[i] = rng.NormFloat64() * 0.1
	}
	return g
}

// lrAt is a learning-rate schedule: the copy must follow SetLR.
func lrAt(s int) float64 { return 1e-3 * float64(1+s%3) }

// wrapBuddy wraps mlp-odd's parameters over g: with buddies when buddy.
func wrapBuddy(t *testing.T, g *allreduce.Group, opt string, buddy bool) (*zero.ZeRO1[float64], error) {
	return wrapBuddyAt(t, g, opt, buddy, 1)
}

// wrapBuddyAt is wrapBuddy with buddies at offset d.
func wrapBuddyAt(t *testing.T, g *allreduce.Group, opt string, buddy bool, d int) (*zero.ZeRO1[float64], error) {
	var z *zero.ZeRO1[float64]
	var err error
	traintest.Build[float64](t, "mlp-odd", 2, func(params G.Nodes) traintest.Wrapper {
		if buddy {
			z, err = zero.WrapWithBuddyAt[float64](context.Background(), g, params, traintest.NewOpt[float64](t, opt), traintest.NewOpt[float64](t, opt), d, buddyBuckets)
		} else {
			z, err = zero.Wrap[float64](context.Background(), g, params, traintest.NewOpt[float64](t, opt), buddyBuckets)
		}
		if err != nil {
			// Build needs a wrapper; the error is returned below.
			z2, err2 := zero.Wrap[float64](context.Background(), g, params, traintest.NewOpt[float64](t, opt), buddyBuckets)
			require.NoError(t, err2)
			return z2
		}
		return z
	})
	return z, err
}

// stepWith runs step s of the arena with the global gradient.
func stepWith(ctx context.Context, z *zero.ZeRO1[float64], s int) error {
	if err := prepareStep(z, s); err != nil {
		return err
	}
	return z.Step(ctx)
}

// prepareStep sets up step s: the shard's part of the global gradient in
// GradShard, and the learning rate.
func prepareStep(z *zero.ZeRO1[float64], s int) error {
	g := globalGrad(s, len(z.DDP().ParamArena()))
	for _, p := range z.Pieces() {
		copy(z.GradShard()[p.Off:p.Off+p.Len()], g[p.Lo:p.Hi])
	}
	return z.Optimizer().SetLR(lrAt(s))
}

// wholeArena trains the arena start for steps steps with one optimizer.
func wholeArena(t *testing.T, opt string, start []float64, steps int) ([]float64, optim.State) {
	o := traintest.NewOpt[float64](t, opt)
	p := append([]float64(nil), start...)
	for s := range steps {
		require.NoError(t, o.SetLR(lrAt(s)))
		require.NoError(t, o.Step(p, globalGrad(s, len(p))))
	}
	return p, o.State()
}

// lossCase: n ranks train k steps with buddies, the ranks in lost are
// dropped, the survivors re-shard and train m more steps.
// local, when not 0, is the ranks per node: buddies at BuddyOffset(n,
// local) in the old world and BuddyOffset of the new world's size after.
type lossCase struct {
	opt     string
	n, k, m int
	lost    []int
	local   int
}

// offset is c's buddy offset in a world of n ranks.
func (c lossCase) offset(n int) int {
	if c.local == 0 || n < 2 {
		return 1
	}
	return zero.BuddyOffset(n, c.local)
}

// phase1 trains the old world and returns every rank's wrapper and the
// arena at the start.
func phase1(t *testing.T, c lossCase) ([]*zero.ZeRO1[float64], []float64) {
	conns, _, err := allreducetest.InprocConns(c.n, 10*time.Second)
	require.NoError(t, err)
	zs := make([]*zero.ZeRO1[float64], c.n)
	var start []float64
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		z, err := wrapBuddyAt(t, g, c.opt, true, c.offset(c.n))
		if err != nil {
			return err
		}
		zs[g.Rank()] = z
		if g.Rank() == 0 {
			start = append([]float64(nil), z.DDP().ParamArena()...)
		}
		for s := range c.k {
			if err := stepWith(ctx, z, s); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return zs, start
}

// phase2 re-shards over the survivors (Reshard) and trains on; it returns
// every survivor's arena and full optimizer state, or the first error.
func phase2(t *testing.T, c lossCase, old []*zero.ZeRO1[float64]) ([][]float64, []optim.State, error) {
	tr := zero.Transition{OldSize: c.n}
	for s := range c.n {
		if !contains(c.lost, s) {
			tr.Old = append(tr.Old, s)
		}
	}
	return newWorld(t, c, old, tr, func(ctx context.Context, from, to *zero.ZeRO1[float64]) error {
		return zero.Reshard(ctx, from, to, c.lost)
	})
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Any one rank of N = 2..5 lost after k steps (and two non-adjacent ones of
// 5): the survivors rebuild its shard from the buddy, re-shard over N-1 and
// train on, bitwise equal to one optimizer over the whole arena.
func TestBuddyLossReshardBitwise(t *testing.T) {
	var cases []lossCase
	for n := 2; n <= 5; n++ {
		for lost := range n {
			opt := []string{"adam", "sgd", "adamw"}[(n+lost)%3]
			cases = append(cases, lossCase{opt: opt, n: n, k: 3, m: 2, lost: []int{lost}})
		}
	}
	cases = append(cases, lossCase{opt: "adam", n: 5, k: 2, m: 2, lost: []int{1, 3}},
		lossCase{opt: "sgd", n: 5, k: 2, m: 2, lost: []int{4, 1}},
		lossCase{opt: "adam", n: 3, k: 0, m: 2, lost: []int{2}}, // lost before the first step
		// A whole node lost, buddies on the next node (offset: ranks
		// per node): 3 nodes of 2 → 2 nodes of 2 (offset 2 again), the
		// last node (its buddies on node 0), 2 nodes → 1 (offset 1 after).
		lossCase{opt: "adam", n: 6, k: 3, m: 2, lost: []int{2, 3}, local: 2},
		lossCase{opt: "adamw", n: 6, k: 2, m: 2, lost: []int{4, 5}, local: 2},
		lossCase{opt: "sgd", n: 6, k: 2, m: 2, lost: []int{0, 1, 2}, local: 3},
		lossCase{opt: "adam", n: 4, k: 2, m: 2, lost: []int{0, 1}, local: 2})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/n=%d/lost=%v/k=%d/local=%d", c.opt, c.n, c.lost, c.k, c.local), func(t *testing.T) {
			old, start := phase1(t, c)
			requireCopies(t, c, old)
			arenas, states, err := phase2(t, c, old)
			require.NoError(t, err)
			wantParams, wantState := wholeArena(t, c.opt, start, c.k+c.m)
			for r := range arenas {
				require.Equal(t, wantParams, arenas[r], "survivor %d's parameters", r)
				require.Equal(t, wantState, states[r], "survivor %d's optimizer state", r)
			}
		})
	}
}

// requireCopies checks that the copy on every rank r's buddy, r+d, is
// r's state, bitwise.
func requireCopies(t *testing.T, c lossCase, old []*zero.ZeRO1[float64]) {
	t.Helper()
	d := c.offset(c.n)
	for r, z := range old {
		left, st, err := old[(r+d)%c.n].BuddyState()
		require.NoError(t, err)
		require.Equal(t, r, left)
		require.Equal(t, z.Optimizer().State(), st, "rank %d's copy on rank %d", r, (r+d)%c.n)
	}
}

// Buddies on the next node (3 nodes of 2 ranks, offset 2; 2 nodes of 3,
// offset 3: odd cycles of the exchange's edges): after every step each
// rank's copy on its buddy is its state, bitwise.
func TestBuddyNextNodeCopiesEveryStep(t *testing.T) {
	for _, c := range []lossCase{{opt: "adam", n: 6, local: 2}, {opt: "adamw", n: 6, local: 3}} {
		for k := 1; k <= 3; k++ {
			c.k = k
			old, _ := phase1(t, c)
			requireCopies(t, c, old)
		}
	}
}

// Two neighbours lost: the first one's only copy was on the second. The
// error names both, so the caller falls back to the checkpoint. With
// buddies on the next node (offset 2), a rank and the same local rank of
// the next node.
func TestBuddyAdjacentLossIsAnError(t *testing.T) {
	for _, c := range []struct {
		lost  []int
		local int
		want  string
	}{
		{[]int{1, 2}, 0, "rank 1's optimizer shard is gone: its buddy, rank 2, which held the only copy, was lost too; resume from the checkpoint"},
		{[]int{0, 3}, 0, "rank 3's optimizer shard is gone: its buddy, rank 0,"},
		{[]int{1, 3}, 2, "rank 1's optimizer shard is gone: its buddy, rank 3, which held the only copy"},
		{[]int{2, 0}, 2, "rank 0's optimizer shard is gone: its buddy, rank 2,"},
	} {
		lc := lossCase{opt: "adam", n: 4, k: 1, m: 1, lost: c.lost, local: c.local}
		old, _ := phase1(t, lc)
		_, _, err := phase2(t, lc, old)
		require.ErrorContains(t, err, c.want)
	}
}

// One rank cannot have a buddy; without buddies a lost shard cannot be
// rebuilt; a shadow configured unlike the optimizer is refused.
func TestBuddyMisuse(t *testing.T) {
	conns, _, err := allreducetest.InprocConns(1, 5*time.Second)
	require.NoError(t, err)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		_, err := wrapBuddy(t, g, "adam", true)
		return err
	})
	require.ErrorContains(t, allreducetest.FirstError(errs), "buddies need at least 2 ranks, the group has 1")

	conns, _, err = allreducetest.InprocConns(2, 5*time.Second)
	require.NoError(t, err)
	errs = allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		var err error
		traintest.Build[float64](t, "mlp-odd", 2, func(params G.Nodes) traintest.Wrapper {
			slow, err2 := optim.NewAdam[float64](optim.AdamConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
			require.NoError(t, err2)
			_, err = zero.WrapWithBuddy[float64](context.Background(), g, params, traintest.NewOpt[float64](t, "adam"), slow)
			z, err2 := zero.Wrap[float64](context.Background(), g, params, traintest.NewOpt[float64](t, "adam"))
			require.NoError(t, err2)
			return z
		})
		return err
	})
	require.ErrorContains(t, allreducetest.FirstError(errs), "the shadow optimizer's lr is 0.0001, the optimizer's lr 0.001")

	conns, _, err = allreducetest.InprocConns(3, 5*time.Second)
	require.NoError(t, err)
	old := make([]*zero.ZeRO1[float64], 3)
	errs = allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		z, err := wrapBuddy(t, g, "sgd", false)
		old[g.Rank()] = z
		if err == nil {
			err = stepWith(context.Background(), z, 0)
		}
		return err
	})
	require.NoError(t, allreducetest.FirstError(errs))
	_, _, err = old[0].BuddyState()
	require.ErrorContains(t, err, "made without buddies")
	_, _, err = phase2(t, lossCase{opt: "sgd", n: 3, k: 1, m: 1, lost: []int{1}}, old)
	require.ErrorContains(t, err, "rank 1's optimizer shard is lost: the run has no buddy copies")
}

// With buddies, a run without loss is the run without buddies, bitwise;
// and a resumed state (LoadFullOptimizerState) reaches the copy too.
func TestBuddyNoLossAndResume(t *testing.T) {
	c := lossCase{opt: "adam", n: 3, k: 4}
	old, start := phase1(t, c)
	wantParams, wantState := wholeArena(t, c.opt, start, c.k)
	require.Equal(t, wantParams, old[1].DDP().ParamArena())

	// Resume the reference's state on 4 ranks with buddies, step on.
	conns, _, err := allreducetest.InprocConns(4, 10*time.Second)
	require.NoError(t, err)
	arenas := make([][]float64, 4)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		z, err := wrapBuddy(t, g, c.opt, true)
		if err != nil {
			return err
		}
		copy(z.DDP().ParamArena(), wantParams)
		if err := z.LoadFullOptimizerState(wantState); err != nil {
			return err
		}
		for s := c.k; s < c.k+2; s++ {
			if err := stepWith(context.Background(), z, s); err != nil {
				return err
			}
		}
		arenas[g.Rank()] = append([]float64(nil), z.DDP().ParamArena()...)
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	want, _ := wholeArena(t, c.opt, start, c.k+2)
	for r := range arenas {
		require.Equal(t, want, arenas[r], "rank %d", r)
	}
}

// regroupPhase runs the new world of tr with Regroup: joiners (-1) start
// from the arena alone (as a heal gives it) and receive their shards.
func regroupPhase(t *testing.T, c lossCase, old []*zero.ZeRO1[float64], tr zero.Transition) ([][]float64, []optim.State, error) {
	return newWorld(t, c, old, tr, func(ctx context.Context, from, to *zero.ZeRO1[float64]) error {
		return zero.Regroup(ctx, from, to, tr)
	})
}

// newWorld runs the world of tr: every rank wraps the model afresh, takes
// the old world's arena, moves the optimizer state with move (from is nil
// on a joiner) and trains c.m steps from c.k; it returns every rank's
// arena and full optimizer state, or the first error.
func newWorld(t *testing.T, c lossCase, old []*zero.ZeRO1[float64], tr zero.Transition, move func(ctx context.Context, from, to *zero.ZeRO1[float64]) error) ([][]float64, []optim.State, error) {
	conns, _, err := allreducetest.InprocConns(len(tr.Old), 10*time.Second)
	require.NoError(t, err)
	arenas := make([][]float64, len(tr.Old))
	states := make([]optim.State, len(tr.Old))
	arena := old[tr.Old[slices.IndexFunc(tr.Old, func(s int) bool { return s >= 0 })]].DDP().ParamArena()
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		var from *zero.ZeRO1[float64]
		if s := tr.Old[g.Rank()]; s >= 0 {
			from = old[s]
		}
		to, err := wrapBuddyAt(t, g, c.opt, g.Size() >= 2, c.offset(g.Size()))
		if err != nil {
			return err
		}
		copy(to.DDP().ParamArena(), arena)
		if err := move(ctx, from, to); err != nil {
			return err
		}
		for s := c.k; s < c.k+c.m; s++ {
			if err := stepWith(ctx, to, s); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
		}
		arenas[g.Rank()] = append([]float64(nil), to.DDP().ParamArena()...)
		states[g.Rank()], err = to.FullOptimizerState(ctx)
		return err
	})
	return arenas, states, allreducetest.FirstError(errs)
}

// A joiner anywhere in the new world (the group grows back), and a loss
// and a join at once: the joiner receives its shard and buddy copy, and
// every rank trains on bitwise as one optimizer over the whole arena.
func TestBuddyRegroupJoin(t *testing.T) {
	for _, c := range []struct {
		n  int
		tr zero.Transition
	}{
		{3, zero.Transition{OldSize: 3, Old: []int{0, 1, 2, -1}}},
		{3, zero.Transition{OldSize: 3, Old: []int{-1, 0, 1, 2}}},
		{2, zero.Transition{OldSize: 2, Old: []int{0, -1, 1, -1}}},
		{4, zero.Transition{OldSize: 4, Old: []int{0, 1, -1, 3}}}, // rank 2 lost, its place taken
		{4, zero.Transition{OldSize: 4, Old: []int{-1, 0, 1, 2}}}, // rank 3 lost (its buddy is rank 0)
	} {
		lc := lossCase{opt: []string{"adam", "sgd"}[c.n%2], n: c.n, k: 3, m: 2}
		t.Run(fmt.Sprintf("%s/%v", lc.opt, c.tr.Old), func(t *testing.T) {
			old, start := phase1(t, lc)
			arenas, states, err := regroupPhase(t, lc, old, c.tr)
			require.NoError(t, err)
			wantParams, wantState := wholeArena(t, lc.opt, start, lc.k+lc.m)
			for r := range arenas {
				require.Equal(t, wantParams, arenas[r], "rank %d's parameters", r)
				require.Equal(t, wantState, states[r], "rank %d's optimizer state", r)
			}
		})
	}
	// A joiner whose optimizer is not the state's is refused.
	lc := lossCase{opt: "adam", n: 2, k: 1}
	old, _ := phase1(t, lc)
	conns, _, err := allreducetest.InprocConns(3, 10*time.Second)
	require.NoError(t, err)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		opt, from := "adam", (*zero.ZeRO1[float64])(nil)
		if g.Rank() < 2 {
			from = old[g.Rank()]
		} else {
			opt = "sgd"
		}
		to, err := wrapBuddy(t, g, opt, true)
		if err != nil {
			return err
		}
		return zero.Regroup(context.Background(), from, to, zero.Transition{OldSize: 2, Old: []int{0, 1, -1}})
	})
	require.ErrorContains(t, errs[2], "the state is adam's, this rank's optimizer is sgd")
}

// With buddies, each bucket's piece of the shard's gradient goes to the
// buddy one more hop after the bucket's reduce-scatter, and Step moves no
// more than ZeRO-1's all-gather besides: per step rank r sends exactly its
// shard more than without buddies (the hop), every bucket's piece but the
// last inside Run (the last bucket's hop is issued in Run and may still be
// in flight when Run returns: Step waits for it).
// Through Run, backward and the hop, every copy stays bitwise the left's
// state and the parameters those of ZeRO-1 without buddies, whatever the
// buckets (per-param with 8 ranks leaves empty pieces) and the world size.
func TestBuddyHopInRun(t *testing.T) {
	ranksList, opts := []int{2, 3, 4, 5, 8}, []string{"sgd", "adam"}
	if testing.Short() {
		ranksList = []int{2, 3, 8}
	}
	if raceEnabled { // under 2 s with the race detector
		ranksList, opts = []int{2, 3, 8}, []string{"adam"}
	}
	forZeroCases(t, opts, ranksList, func(t *testing.T, plain run) {
		want := train(t, plain)
		buddies := plain
		buddies.buddy = true
		// The last bucket's hop outlives Run: a context that ends with Run
		// must not cancel it.
		buddies.runCancelled = true
		got := train(t, buddies)
		require.Equal(t, want.params, got.params)
		for r := range plain.ranks {
			left := (r + plain.ranks - 1) % plain.ranks
			require.Equal(t, got.own[left], got.copies[r], "rank %d's copy of rank %d's shard", r, left)
			shard := int64(len(got.grads[r])) * 8
			pieces := got.pieces[r]
			last := int64(pieces[len(pieces)-1].Len()) * 8
			require.Equal(t, want.sent[r]+shard, got.sent[r], "rank %d: the step's bytes, the hop included", r)
			require.GreaterOrEqual(t, got.sentRun[r], want.sentRun[r]+shard-last, "rank %d: Run's bytes, every hop but the last bucket's included", r)
			require.LessOrEqual(t, got.sentRun[r], want.sentRun[r]+shard, "rank %d: Run's bytes", r)
		}
	})
}
