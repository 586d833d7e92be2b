package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
)

func TestFaultLinks(t *testing.T) {
	sentinelErr := errors.New("injected-link-error")
	colls := []struct {
		name string
		call func(ctx context.Context, g *allreduce.Group, _ *inproc.World) error
	}{
		{"AllReduce", func(ctx context.Context, g *allreduce.Group, _ *inproc.World) error {
			return allreduce.AllReduce(ctx, g, make([]float32, 50000), allreduce.Sum)
		}},
		{"AllReduce-small", func(ctx context.Context, g *allreduce.Group, _ *inproc.World) error {
			return allreduce.AllReduce(ctx, g, make([]float64, 7), allreduce.Avg)
		}},
		{"Broadcast", func(ctx context.Context, g *allreduce.Group, _ *inproc.World) error {
			return allreduce.Broadcast(ctx, g, make([]int32, 100), 0)
		}},
		{"Reduce", func(ctx context.Context, g *allreduce.Group, _ *inproc.World) error {
			return allreduce.Reduce(ctx, g, make([]int32, 100), allreduce.Sum, 1)
		}},
	}
	var cases []faultCase
	for _, cl := range colls {
		cases = append(cases,
			faultCase{
				name: "cut/" + cl.name + "/ranks=3", n: 3, fast: true,
				setup: func(w *inproc.World) { _ = w.SetFault(0, 1, inproc.Fault{Cut: true}) },
				call:  cl.call,
				check: func(t *testing.T, r int, err error) {
					require.ErrorIs(t, err, transport.ErrPeer, "rank %d", r)
				},
			},
			faultCase{
				name: "err/" + cl.name + "/ranks=3", n: 3, fast: true,
				setup: func(w *inproc.World) { _ = w.SetFault(0, 1, inproc.Fault{Err: sentinelErr}) },
				call:  cl.call,
				check: func(t *testing.T, r int, err error) {
					require.Contains(t, err.Error(), sentinelErr.Error(), "rank %d: the cause must travel", r)
					if r == 0 {
						require.ErrorIs(t, err, sentinelErr)
					}
				},
			},
			faultCase{
				// Messages on 0→1 vanish: rank 1 waits for its timeout.
				name: "drop/" + cl.name + "/ranks=3", n: 3,
				setup: func(w *inproc.World) { _ = w.SetFault(0, 1, inproc.Fault{Drop: true}) },
				call:  cl.call,
				check: isPeerOrTimeout,
			},
		)
	}
	runFaultCases(t, cases)
}

// TestFaultDelayStillCorrect: delayed links make collectives slower, not
// wrong.
func TestFaultDelayStillCorrect(t *testing.T) {
	for _, algo := range algos {
		t.Run("algo="+algo.String(), func(t *testing.T) {
			t.Parallel()
			const n, length, delay = 4, 10007, 20 * time.Millisecond
			conns, w, err := allreducetest.InprocConns(n, 5*time.Second)
			require.NoError(t, err)
			require.NoError(t, w.SetFault(0, 1, inproc.Fault{Delay: delay}))
			require.NoError(t, w.SetFault(2, 3, inproc.Fault{Delay: delay}))
			require.NoError(t, w.SetFault(3, 0, inproc.Fault{Delay: delay}))
			inputs := make([][]float32, n)
			for r := range inputs {
				inputs[r] = reference.Input[float32](3, r, length, allreduce.Sum)
			}
			want := reference.Reduce(inputs, allreduce.Sum)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				buf := slices.Clone(inputs[g.Rank()])
				if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
					return err
				}
				if err := allreducetest.DiffBits("AllReduce", buf, want); err != nil {
					return err
				}
				b := slices.Clone(inputs[g.Rank()])
				if err := allreduce.Broadcast(ctx, g, b, 3); err != nil {
					return err
				}
				return allreducetest.DiffBits("Broadcast", b, inputs[3])
			}, allreduce.WithAlgorithm(algo))
			require.NoError(t, allreducetest.FirstError(errs))
			require.GreaterOrEqual(t, time.Since(start), delay, "the delay must be applied")
		})
	}
}

// TestFaultHealedLink: a fault replaced by the zero Fault before the
// collective does not affect it.
func TestFaultHealedLink(t *testing.T) {
	conns, w, err := allreducetest.InprocConns(2, 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{Drop: true}))
	require.NoError(t, w.SetFault(0, 1, inproc.Fault{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		buf := []float32{float32(g.Rank() + 1)}
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
			return err
		}
		if buf[0] != 3 {
			return fmt.Errorf("got %v, want 3", buf[0])
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// TestMisuseBeforeCommunication: misuse on a rank is an ErrInvalid error
// found before any communication, so it comes back at once even when no
// other rank calls at all.
func TestMisuseBeforeCommunication(t *testing.T) {
	type misuse struct {
		name string
		call func(ctx context.Context, g *allreduce.Group) error
	}
	cases := []misuse{
		{"ReduceScatter-dst-too-long", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.ReduceScatter(ctx, g, make([]float32, 5), make([]float32, 12), allreduce.Sum)
		}},
		{"ReduceScatter-dst-too-short", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.ReduceScatter(ctx, g, make([]float32, 3), make([]float32, 13), allreduce.Sum)
		}},
		{"ReduceScatter-dst-nil", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.ReduceScatter(ctx, g, nil, make([]int64, 12), allreduce.Max)
		}},
		{"AllGather-src-wrong", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllGather(ctx, g, make([]float64, 12), make([]float64, 5))
		}},
		{"AllGather-src-nil", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllGather(ctx, g, make([]float64, 12), nil)
		}},
		{"Broadcast-root-too-big", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.Broadcast(ctx, g, make([]float32, 4), 3)
		}},
		{"Broadcast-root-negative", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.Broadcast(ctx, g, make([]float32, 4), -1)
		}},
		{"Reduce-root-too-big", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.Reduce(ctx, g, make([]int32, 4), allreduce.Sum, 99)
		}},
		{"AllReduce-Avg-int32", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllReduce(ctx, g, make([]int32, 4), allreduce.Avg)
		}},
		{"AllReduce-Avg-int64-async", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllReduceAsync(ctx, g, make([]int64, 4), allreduce.Avg).Wait(ctx)
		}},
		{"ReduceScatter-Avg-int32", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.ReduceScatter(ctx, g, make([]int32, 4), make([]int32, 12), allreduce.Avg)
		}},
		{"Reduce-Avg-int64", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.Reduce(ctx, g, make([]int64, 4), allreduce.Avg, 0)
		}},
		{"AllReduce-unknown-op", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllReduce(ctx, g, make([]float32, 4), allreduce.ReduceOp(99))
		}},
		{"AllReduce-op-zero", func(ctx context.Context, g *allreduce.Group) error {
			return allreduce.AllReduce(ctx, g, make([]float32, 4), allreduce.ReduceOp(0))
		}},
	}
	for _, algo := range algos {
		for _, m := range cases {
			t.Run(m.name+"/algo="+algo.String(), func(t *testing.T) {
				t.Parallel()
				// Alone: ranks 0 and 2 never call; the misuse must not wait for them.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var took time.Duration
				errs := allreducetest.RunInproc(3, longTimeout, func(g *allreduce.Group) error {
					if g.Rank() != 1 {
						return nil
					}
					start := time.Now()
					err := m.call(ctx, g)
					took = time.Since(start)
					return err
				}, allreduce.WithAlgorithm(algo))
				require.ErrorIs(t, errs[1], allreduce.ErrInvalid)
				require.NotErrorIs(t, errs[1], transport.ErrPeer)
				require.NotErrorIs(t, errs[1], transport.ErrTimeout)
				require.Less(t, took, longTimeout/2, "misuse must be found before communicating")

				// With the others calling correctly: they fail fast too.
				start := time.Now()
				errs = allreducetest.RunInproc(3, longTimeout, func(g *allreduce.Group) error {
					if g.Rank() == 1 {
						return m.call(ctx, g)
					}
					return allreduce.AllReduce(ctx, g, make([]float32, 12), allreduce.Sum)
				}, allreduce.WithAlgorithm(algo))
				require.Less(t, time.Since(start), longTimeout*2/3, "peers of a misusing rank must fail fast")
				require.ErrorIs(t, errs[1], allreduce.ErrInvalid)
				for _, r := range []int{0, 2} {
					require.Error(t, errs[r], "rank %d", r)
				}
			})
		}
	}
}
