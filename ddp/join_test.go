package ddp_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// joinCoef is rank r's gradient of parameter i, element j, at iteration s
// (linearNet's coefficients, rewritten every iteration).
func joinCoef(r, s, i, j int) float32 {
	return float32(math.Sin(float64(1+r*7+s*13+i*31+j*3))) * float32(1+i)
}

const joinLR, joinMomentum = 0.1, 0.9

// joinReference is PyTorch's Join with DDP, in plain Go: at iteration s the
// active ranks are those with more than s batches; the gradient is the sum
// of theirs divided by the world size (divide_by_initial_world_size=True)
// or by their number; every active rank steps SGD with momentum (their
// states are equal: each active rank was active at every earlier
// iteration); the final model is the last joiners'. Parameters in creation
// order.
func joinReference(init [][]float64, batches []int, byActive bool) [][]float64 {
	p := make([][]float64, len(init))
	buf := make([][]float64, len(init))
	for i := range init {
		p[i] = append([]float64(nil), init[i]...)
		buf[i] = make([]float64, len(init[i]))
	}
	for s := 0; ; s++ {
		var active []int
		for r, b := range batches {
			if s < b {
				active = append(active, r)
			}
		}
		if len(active) == 0 {
			return p
		}
		div := float64(len(batches))
		if byActive {
			div = float64(len(active))
		}
		for i := range p {
			for j := range p[i] {
				sum := 0.0
				for _, r := range active {
					sum += float64(joinCoef(r, s, i, j))
				}
				g := sum / div
				if s == 0 {
					buf[i][j] = g
				} else {
					buf[i][j] = joinMomentum*buf[i][j] + g
				}
				p[i][j] -= joinLR * buf[i][j]
			}
		}
	}
}

// TestJoinUnevenInputs: ranks with different numbers of batches (10%
// fewer on one rank, none on one rank, one rank alone, all different)
// finish without hanging, and every rank ends with the parameters of the
// plain-Go reference of PyTorch's Join semantics, in both divisor modes,
// with one bucket and with a bucket per parameter; and with ZeRO-1
// (zero.ZeRO1.Join), the joined ranks updating their shards.
func TestJoinUnevenInputs(t *testing.T) {
	cases := [][]int{{10, 10, 9}, {5, 0, 5}, {3}, {0}, {4, 2, 3, 1}, {2, 2}}
	sizes := []int{5, 3, 7}
	for _, batches := range cases {
		for _, byActive := range []bool{false, true} {
			for _, bucket := range []int{4, 1 << 20} {
				t.Run(fmt.Sprintf("batches=%v/byActive=%v/bucket=%d", batches, byActive, bucket), func(t *testing.T) {
					checkJoin(t, batches, sizes, byActive, bucket, false)
				})
				if !byActive {
					t.Run(fmt.Sprintf("batches=%v/zero1/bucket=%d", batches, bucket), func(t *testing.T) {
						checkJoin(t, batches, sizes, false, bucket, true)
					})
				}
			}
		}
	}
}

func checkJoin(t *testing.T, batches, sizes []int, byActive bool, bucket int, zero1 bool) {
	ranks := len(batches)
	final := make([][]float32, ranks)
	var init [][]float64
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: joinLR, Momentum: joinMomentum})
		if err != nil {
			return err
		}
		opts := []ddp.Option{ddp.WithBucketBytes(bucket, bucket), ddp.WithAgreement(func() bool { return false })}
		var z *zero.ZeRO1[float32]
		n, d := newLinearNetWrapped(t, g, sizes, 5, func(params G.Nodes) (*ddp.DDP[float32], error) {
			if !zero1 {
				return ddp.Wrap[float32](context.Background(), g, params, opts...)
			}
			var err error
			if z, err = zero.Wrap[float32](context.Background(), g, params, opt, opts...); err != nil {
				return nil, err
			}
			return z.DDP(), nil
		})
		step := func(ctx context.Context) error { return d.Step(ctx, opt) }
		join := func() (*ddp.Joiner[float32], error) { return d.Join(ddp.JoinOptions{DivideByActive: byActive}) }
		if zero1 {
			step = z.Step
			join = z.Join
		}
		r := g.Rank()
		if r == 0 {
			init = paramsOf(d, len(sizes))
		}
		j, err := join()
		if err != nil {
			return err
		}
		ctx := context.Background()
		if err := runBatches(ctx, n, j, r, batches, step); err != nil {
			return err
		}
		if err := j.Finish(ctx); err != nil {
			return err
		}
		final[r] = append([]float32(nil), d.ParamArena()...)
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	requireArenasClose(t, final, sizes, joinReference(init, batches, byActive))
}

// paramsOf is d's first n parameters, creation order, as float64.
func paramsOf(d *ddp.DDP[float32], n int) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		lo, hi := d.Offset(i)
		for _, v := range d.ParamArena()[lo:hi] {
			out[i] = append(out[i], float64(v))
		}
	}
	return out
}

// runBatches runs rank r's batches[r] iterations under j: joinCoef's
// gradients, j.Run, a check of the active count, then step.
func runBatches(ctx context.Context, n *linearNet, j *ddp.Joiner[float32], r int, batches []int, step func(context.Context) error) error {
	for s := 0; s < batches[r]; s++ {
		for i, c := range n.coef {
			for k := range c {
				c[k] = joinCoef(r, s, i, k)
			}
		}
		if err := j.Run(ctx, n.vm); err != nil {
			return err
		}
		want := 0
		for _, b := range batches {
			if s < b {
				want++
			}
		}
		if j.Active() != want {
			return fmt.Errorf("iteration %d: %d active ranks, want %d", s, j.Active(), want)
		}
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestJoinRefusals: Join is refused, naming why, with a custom bucket
// collective, the replica check, and DivideByActive with the optimizer in
// backward; Run after Finish is an error.
func TestJoinRefusals(t *testing.T) {
	errs := allreducetest.RunInproc(1, 10*time.Second, func(g *allreduce.Group) error {
		custom := ddp.WithBucketCollective[float32](func(context.Context, *allreduce.Group, []float32, int, int) error { return nil })
		_, d := newLinearNet(t, g, []int{3}, 1, custom)
		_, err := d.Join(ddp.JoinOptions{})
		require.ErrorContains(t, err, "custom bucket collective")
		_, err = d.Join(ddp.JoinOptions{DivideByActive: true, ShadowStep: func(context.Context) error { return nil }})
		require.ErrorContains(t, err, "DivideByActive and a ShadowStep")
		ps, err := ddp.NewPowerSGD[float32](ddp.DefaultPowerSGDConfig())
		require.NoError(t, err)
		_, d = newLinearNet(t, g, []int{3}, 1, ddp.WithCommHook[float32](ps))
		_, err = d.Join(ddp.JoinOptions{DivideByActive: true})
		require.ErrorContains(t, err, "DivideByActive and a communication hook")
		_, d = newLinearNet(t, g, []int{3}, 1, ddp.WithReplicaCheck(1))
		_, err = d.Join(ddp.JoinOptions{})
		require.ErrorContains(t, err, "WithReplicaCheck")
		opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.1})
		require.NoError(t, err)
		n, d := newLinearNet(t, g, []int{3}, 1, ddp.WithOptimizerInBackward[float32](opt))
		_, err = d.Join(ddp.JoinOptions{DivideByActive: true})
		require.ErrorContains(t, err, "optimizer in backward")
		j, err := d.Join(ddp.JoinOptions{})
		require.NoError(t, err)
		require.NoError(t, j.Finish(context.Background()))
		require.ErrorContains(t, j.Run(context.Background(), n.vm), "after Finish")
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// requireArenasClose checks every rank's parameter arena (parameters of
// the given sizes in reverse creation order) against want (creation
// order), to a relative 1e-5.
func requireArenasClose(t *testing.T, arenas [][]float32, sizes []int, want [][]float64) {
	t.Helper()
	for r, a := range arenas {
		off := len(a)
		for i, n := range sizes {
			off -= n
			for k := 0; k < n; k++ {
				got := float64(a[off+k])
				require.LessOrEqual(t, math.Abs(got-want[i][k]), 1e-5*(1+math.Abs(want[i][k])), "rank %d p%d[%d]: got %v, want %v", r, i, k, got, want[i][k])
			}
		}
	}
}

// TestJoinPassesTheStopVote: with WithAgreement, a stop agreed in an
// iteration the joined rank shadowed reaches it (Stopped), and the joined
// rank's own vote reaches the active ranks.
func TestJoinPassesTheStopVote(t *testing.T) {
	for _, voter := range []int{0, 1} {
		stopped := make([]bool, 2)
		errs := allreducetest.RunInproc(2, 10*time.Second, func(g *allreduce.Group) error {
			r := g.Rank()
			iter := 0
			vote := func() bool { iter++; return r == voter && iter == 2 }
			n, d := newLinearNet(t, g, []int{3, 2}, 1, ddp.WithAgreement(vote))
			j, err := d.Join(ddp.JoinOptions{})
			if err != nil {
				return err
			}
			ctx := context.Background()
			batches := []int{3, 1}[r]
			for s := 0; s < batches; s++ {
				if err := j.Run(ctx, n.vm); err != nil {
					return err
				}
				if d.Agreed().Stop {
					stopped[r] = true
					break
				}
			}
			if err := j.Finish(ctx); err != nil {
				return err
			}
			stopped[r] = stopped[r] || j.Stopped()
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
		require.Equal(t, []bool{true, true}, stopped, "voter rank %d", voter)
	}
}
