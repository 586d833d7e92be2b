package ddp_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
)

// A user's hook sees every bucket once per step, in order, with the
// parameters' offsets and shapes the DDP's layout gives, the last one
// marked; a hook that all-reduces with Avg gives bitwise the default's
// gradients.
func TestCommHookSeesTheBuckets(t *testing.T) {
	ctx := context.Background()
	grads := func(hooked bool) [][]float32 {
		out := make([][]float32, 2)
		errs := allreducetest.RunInproc(2, 20*time.Second, func(g *allreduce.Group) error {
			var seen []int
			var d *ddp.DDP[float32]
			hook := ddp.CommHookFunc[float32](func(ctx context.Context, b *ddp.GradBucket[float32]) error {
				seen = append(seen, b.Index())
				r := d.BucketRanges()[b.Index()]
				require.Len(t, b.Buffer(), r[1]-r[0])
				require.Equal(t, b.Index() == len(d.BucketRanges())-1, b.IsLast())
				require.Same(t, g, b.Group())
				for k := range b.Len() {
					lo, hi := d.Offset(b.Parameter(k))
					require.Equal(t, lo-r[0], b.Offset(k))
					require.Len(t, b.Gradient(k), hi-lo)
					require.Equal(t, []int(d.Params()[b.Parameter(k)].Shape()), b.Shape(k))
				}
				return allreduce.AllReduce(ctx, b.Group(), b.Buffer(), allreduce.Avg)
			})
			opts := []ddp.Option{ddp.WithBucketBytes(1<<10, 64<<10)}
			if hooked {
				opts = append(opts, ddp.WithCommHook[float32](hook))
			}
			n, dd := traintest.BuildNet[float32](t, "mlp", 4, g, opts...)
			d = dd
			for s := range 2 {
				x, y := traintest.BatchData[float32](s, 8)
				xr, yr := traintest.Rows(x, y, g.Rank(), 4)
				traintest.SetInput(t, n, xr, yr)
				require.NoError(t, d.Run(ctx, n.VM))
			}
			if hooked {
				nb := len(d.BucketRanges())
				require.Greater(t, nb, 1)
				want := []int{}
				for range 2 {
					for b := range nb {
						want = append(want, b)
					}
				}
				require.Equal(t, want, seen)
			}
			out[g.Rank()] = slices.Clone(d.GradArena())
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
		return out
	}
	require.Equal(t, grads(false), grads(true))
}

// A hook together with a bucket collective, or of the other element type,
// is refused at Wrap.
func TestCommHookMisconfigured(t *testing.T) {
	errs := allreducetest.RunInproc(1, 10*time.Second, func(g *allreduce.Group) error {
		n, _ := traintest.BuildNet[float32](t, "mlp", 2, g)
		noop := func(context.Context, *allreduce.Group, []float32, int, int) error { return nil }
		_, err := ddp.Wrap[float32](context.Background(), g, n.Params,
			ddp.WithCommHook[float32](ddp.CommHookFunc[float32](func(context.Context, *ddp.GradBucket[float32]) error { return nil })),
			ddp.WithBucketCollective[float32](noop))
		require.ErrorContains(t, err, "WithCommHook and WithBucketCollective both given")
		_, err = ddp.Wrap[float32](context.Background(), g, n.Params,
			ddp.WithCommHook[float64](ddp.CommHookFunc[float64](func(context.Context, *ddp.GradBucket[float64]) error { return nil })))
		require.ErrorContains(t, err, "does not match the wrapper's element type")
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// A hook that fails on one rank fails the others' step at once, naming
// the rank and the bucket, instead of leaving them to their timeout.
func TestCommHookErrorFailsPeers(t *testing.T) {
	start := time.Now()
	errs := allreducetest.RunInproc(2, 20*time.Second, func(g *allreduce.Group) error {
		hook := ddp.CommHookFunc[float32](func(ctx context.Context, b *ddp.GradBucket[float32]) error {
			if g.Rank() == 1 {
				return errors.New("compressor out of memory")
			}
			return allreduce.AllReduce(ctx, b.Group(), b.Buffer(), allreduce.Avg)
		})
		n, d := traintest.BuildNet[float32](t, "mlp", 4, g, ddp.WithCommHook[float32](hook))
		x, y := traintest.BatchData[float32](0, 8)
		xr, yr := traintest.Rows(x, y, g.Rank(), 4)
		traintest.SetInput(t, n, xr, yr)
		return d.Run(context.Background(), n.VM)
	})
	require.Less(t, time.Since(start), 10*time.Second)
	require.ErrorContains(t, errs[0], "rank 1: communication hook on bucket 0: compressor out of memory")
	require.ErrorContains(t, errs[1], "communication hook on bucket 0: compressor out of memory")
}
