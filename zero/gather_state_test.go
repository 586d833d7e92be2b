package zero_test

import (
	"context"
	"fmt"
	"runtime"
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

// GatherOptimizerState leaves on root exactly what FullOptimizerState gives
// every rank, and DDP's own optimizer state (bitwise: same reduction order
// over allreduce.Ring); every other rank gets the zero State. Segments of 3
// elements make every piece several collectives.
func TestGatherOptimizerState(t *testing.T) {
	for _, segment := range []int{0, 3} {
		for _, opt := range []string{"sgd", "adamw"} {
			for _, ranks := range []int{1, 2, 3, 5} {
				for _, steps := range []int{0, 3} {
					for root := 0; root < ranks; root++ {
						t.Run(fmt.Sprintf("segment=%d/%s/ranks=%d/steps=%d/root=%d", segment, opt, ranks, steps, root), func(t *testing.T) {
							if segment > 0 {
								defer zero.SetGatherSegment(segment)()
							}
							base := run{kind: "mlp-odd", opt: opt, ranks: ranks, perRank: 2, steps: steps, algo: allreduce.Ring,
								opts: []ddp.Option{ddp.WithBucketBytes(4<<10, 16<<10)}}
							want := train(t, base)
							z := base
							z.zero1, z.gatherRoot = true, root
							got := train(t, z)
							for r := 0; r < ranks; r++ {
								require.Equal(t, got.fullAll[0], got.fullAll[r], "FullOptimizerState on rank %d", r)
								if r == root {
									require.Equal(t, got.fullAll[r], got.gathered[r], "root %d", r)
									require.Equal(t, want.fullState, got.gathered[r], "DDP's optimizer state")
									require.NoError(t, got.gathered[r].Validate())
								} else {
									require.Equal(t, optim.State{}, got.gathered[r], "rank %d is not the root", r)
								}
							}
							if steps == 0 {
								require.Zero(t, got.gathered[root].Len)
							} else {
								require.Equal(t, int(want.gradBytes/8), got.gathered[root].Len)
							}
						})
					}
				}
			}
		}
	}
}

func TestGatherOptimizerStateBadRoot(t *testing.T) {
	errs := allreducetest.RunInproc(2, 5*time.Second, func(g *allreduce.Group) error {
		opt := traintest.NewOpt[float64](t, "adam")
		var z *zero.ZeRO1[float64]
		traintest.Build[float64](t, "mlp-odd", 1, func(params G.Nodes) traintest.Wrapper {
			var err error
			z, err = zero.Wrap[float64](context.Background(), g, params, opt)
			require.NoError(t, err)
			return z
		})
		_, err := z.GatherOptimizerState(context.Background(), 2)
		return err
	})
	for _, err := range errs {
		require.ErrorContains(t, err, "gather root 2 out of range")
	}
}

// Bytes allocated by all ranks together in one GatherOptimizerState: the
// root's full state plus each rank's copy of its own shard state (about
// twice the full state, whatever N) and a segment of scratch per relaying
// rank, where FullOptimizerState allocates the full state on every rank
// (N+1 times it).
func TestGatherOptimizerStateAllocatesOnRootOnly(t *testing.T) {
	const ranks = 4
	defer zero.SetGatherSegment(1024)()
	var gatherBytes, fullBytes, stateBytes uint64
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		ctx := context.Background()
		opt := traintest.NewOpt[float64](t, "adam")
		var z *zero.ZeRO1[float64]
		n := traintest.Build[float64](t, "mlp", 2, func(params G.Nodes) traintest.Wrapper {
			var err error
			z, err = zero.Wrap[float64](ctx, g, params, opt, ddp.WithBucketBytes(16<<10, 64<<10))
			require.NoError(t, err)
			return z
		})
		x, y := traintest.BatchData[float64](0, 2*ranks)
		xr, yr := traintest.Rows(x, y, g.Rank(), 2)
		traintest.SetInput(t, n, xr, yr)
		if err := z.Run(ctx, n.VM); err != nil {
			return err
		}
		if err := z.Step(ctx); err != nil {
			return err
		}
		measure := func(fn func() error) (uint64, error) {
			var before, after runtime.MemStats
			if g.Rank() == 0 {
				runtime.ReadMemStats(&before)
			}
			// Every rank starts after rank 0's first reading and ends
			// before its second.
			if err := allreduce.Barrier(ctx, g); err != nil {
				return 0, err
			}
			if err := fn(); err != nil {
				return 0, err
			}
			if err := allreduce.Barrier(ctx, g); err != nil {
				return 0, err
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc, nil
		}
		gb, err := measure(func() error { _, err := z.GatherOptimizerState(ctx, 1); return err })
		if err != nil {
			return err
		}
		fb, err := measure(func() error { _, err := z.FullOptimizerState(ctx); return err })
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			gatherBytes, fullBytes = gb, fb
			stateBytes = uint64(len(z.DDP().GradArena())) * 2 * 8 // Adam: two float64 buffers
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	t.Logf("full state %d bytes; allocated by GatherOptimizerState %d, by FullOptimizerState %d", stateBytes, gatherBytes, fullBytes)
	require.Greater(t, fullBytes, uint64(ranks)*stateBytes, "the measurement sees every rank's full copy")
	// 2× plus scratch and bookkeeping; a full copy on two ranks would
	// already be 3×.
	require.Less(t, gatherBytes, stateBytes*3, "more than the root's full state and the shards' copies")
}
