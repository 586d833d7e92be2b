package zero_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/zero"
)

// failCase: n ranks train k steps with buddies; in step k rank lost dies
// (aborts its group) and of the survivors those in stepped were already
// in Step (they update their shard, replay their left's, and fail in the
// exchange or the all-gather), the others still in the backward pass.
type failCase struct {
	lossCase
	stepped []int
}

// failMidStep runs the old world through the failed step k and returns
// every survivor's Kept (nil for the lost rank).
func failMidStep(t *testing.T, c failCase) ([]*zero.Kept[float64], []float64) {
	conns, _, err := allreducetest.InprocConns(c.n, 10*time.Second)
	require.NoError(t, err)
	kept := make([]*zero.Kept[float64], c.n)
	var start []float64
	// No rank fails before every rank has finished the k steps: an abort
	// may drop a message still on its way to a peer.
	var trained sync.WaitGroup
	trained.Add(c.n)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		z, err := trainedRank(t, g, c.opt, c.k, &start, c.offset(c.n))
		trained.Done()
		if err != nil {
			return err
		}
		r := g.Rank()
		trained.Wait()
		switch {
		case contains(c.lost, r):
			g.Abort(errors.New("killed"))
			return nil
		case contains(c.stepped, r):
			if err := stepWith(ctx, z, c.k); err == nil {
				return fmt.Errorf("rank %d: step %d succeeded without rank %v", r, c.k, c.lost)
			}
		}
		// A survivor not in Step was in the backward pass: nothing of its
		// state changed. Its group fails too.
		defer g.Abort(errors.New("the group failed"))
		kept[r], err = z.Keep()
		if err == nil && kept[r].Done() != int64(c.k) {
			err = fmt.Errorf("rank %d: %d steps done, want %d", r, kept[r].Done(), c.k)
		}
		return err
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return kept, start
}

// trainedRank wraps rank g's arena with buddies and trains it k steps;
// rank 0 keeps the starting parameters in start.
func trainedRank(t *testing.T, g *allreduce.Group, opt string, k int, start *[]float64, d int) (*zero.ZeRO1[float64], error) {
	z, err := wrapBuddyAt(t, g, opt, true, d)
	if err != nil {
		return nil, err
	}
	if g.Rank() == 0 {
		*start = append([]float64(nil), z.DDP().ParamArena()...)
	}
	for s := range k {
		if err := stepWith(context.Background(), z, s); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
	}
	return z, nil
}

// recoverWorld recovers the survivors of c (their kept versions) at step
// into a new world, trains it m more steps and compares it with one
// optimizer over the whole arena from start.
func recoverWorld(t *testing.T, c lossCase, kept []*zero.Kept[float64], start []float64, step int) {
	tr := zero.Transition{OldSize: c.n}
	old := make([]*zero.ZeRO1[float64], c.n)
	for s := range c.n {
		if !contains(c.lost, s) {
			tr.Old = append(tr.Old, s)
		}
	}
	old[tr.Old[0]] = kept[tr.Old[0]].Wrapper()
	next := c
	next.k = step
	arenas, states, err := newWorld(t, next, old, tr, func(ctx context.Context, _, to *zero.ZeRO1[float64]) error {
		for i := range to.DDP().ParamArena() {
			to.DDP().ParamArena()[i] = math.NaN()
		}
		return zero.Recover(ctx, kept[tr.Old[to.DDP().Group().Rank()]], to, tr, int64(step))
	})
	require.NoError(t, err)
	wantParams, wantState := wholeArena(t, c.opt, start, step+c.m)
	for r := range arenas {
		require.Equal(t, wantParams, arenas[r], "survivor %d's parameters", r)
		require.Equal(t, wantState, states[r], "survivor %d's optimizer state", r)
	}
}

// A rank dies in step k while some survivors have updated their shard
// (and replayed their left's) and others have not: Recover rolls every
// shard back to step k, the lost one's from its buddy, and the survivors
// redo step k and train on, bitwise equal to one optimizer over the whole
// arena — nothing lost, nothing applied twice.
func TestBuddyRecoverMidStep(t *testing.T) {
	for _, c := range []failCase{
		{lossCase{opt: "adam", n: 4, k: 3, m: 2, lost: []int{2}}, []int{0, 1, 3}},
		{lossCase{opt: "adamw", n: 4, k: 2, m: 2, lost: []int{1}}, []int{0, 3}},
		{lossCase{opt: "sgd", n: 3, k: 2, m: 2, lost: []int{2}}, []int{1}},
		{lossCase{opt: "adam", n: 3, k: 0, m: 2, lost: []int{0}}, []int{1, 2}}, // the first step
		{lossCase{opt: "adam", n: 2, k: 2, m: 2, lost: []int{1}}, []int{0}},    // down to one rank
		// A whole node of 2 lost (buddies on the next node, offset 2).
		{lossCase{opt: "adam", n: 6, k: 2, m: 2, lost: []int{2, 3}, local: 2}, []int{0, 5}},
		{lossCase{opt: "sgd", n: 6, k: 1, m: 2, lost: []int{3, 4, 5}, local: 3}, []int{0}},
	} {
		t.Run(fmt.Sprintf("%s/n=%d/lost=%v/stepped=%v", c.opt, c.n, c.lost, c.stepped), func(t *testing.T) {
			kept, start := failMidStep(t, c)
			recoverWorld(t, c.lossCase, kept, start, c.k)
		})
	}
}

// A rank is lost after a step that every rank but its buddy completed
// (the buddy's all-gather failed after its last receive): the buddy's
// copy of the lost shard is a step behind the survivors' S = k+1, and
// Recover replays the lost rank's gradient of step k, which the buddy had
// received, on it. The survivors continue from S, bitwise equal to one
// optimizer over the whole arena.
func TestBuddyRecoverPendingGradient(t *testing.T) {
	for _, c := range []lossCase{
		{opt: "adam", n: 4, k: 2, m: 2, lost: []int{1}},
		{opt: "sgd", n: 3, k: 1, m: 2, lost: []int{2}}, // its buddy is rank 0
		{opt: "adamw", n: 2, k: 0, m: 2, lost: []int{0}},
	} {
		t.Run(fmt.Sprintf("%s/n=%d/k=%d/lost=%v", c.opt, c.n, c.k, c.lost), func(t *testing.T) {
			conns, _, err := allreducetest.InprocConns(c.n, 10*time.Second)
			require.NoError(t, err)
			kept := make([]*zero.Kept[float64], c.n)
			var start []float64
			lost, buddy := c.lost[0], (c.lost[0]+c.offset(c.n))%c.n
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				ctx := context.Background()
				z, err := trainedRank(t, g, c.opt, c.k, &start, c.offset(c.n))
				if err != nil {
					return err
				}
				r := g.Rank()
				if r != buddy {
					if err := stepWith(ctx, z, c.k); err != nil {
						return fmt.Errorf("step %d: %w", c.k, err)
					}
				} else {
					if err := prepareStep(z, c.k); err != nil {
						return err
					}
					if zero.StepGatherLost(ctx, z) == nil {
						return fmt.Errorf("rank %d: step %d did not fail", r, c.k)
					}
				}
				if r == lost {
					return nil
				}
				kept[r], err = z.Keep()
				want := int64(c.k + 1)
				if r == buddy {
					want--
				}
				if err == nil && kept[r].Done() != want {
					err = fmt.Errorf("rank %d: %d steps done, want %d", r, kept[r].Done(), want)
				}
				return err
			})
			require.NoError(t, allreducetest.FirstError(errs))
			recoverWorld(t, c, kept, start, c.k+1)
		})
	}
}
