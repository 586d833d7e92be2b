package ddp_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// asMatrix is a hook that shows PowerSGD each bucket as one rows×cols
// matrix (linearNet's parameters are vectors, which PowerSGD would not
// approximate) and records, per rank, the sum over steps of its inputs
// and outputs, and whether a joined rank's inputs were zero.
type asMatrix struct {
	inner      *ddp.PowerSGD[float32]
	rows, cols int
	joined     bool
	in, out    []float64
	nonZero    bool // a joined rank's input was not zero
}

func (h *asMatrix) Reduce(ctx context.Context, b *ddp.GradBucket[float32]) error {
	buf := b.Buffer()
	if h.in == nil {
		h.in, h.out = make([]float64, len(buf)), make([]float64, len(buf))
	}
	for i, v := range buf {
		h.in[i] += float64(v)
		h.nonZero = h.nonZero || h.joined && v != 0
	}
	m, err := ddp.NewGradBucket(b.Group(), b.Index(), b.IsLast(), buf, [][]int{{h.rows, h.cols}})
	if err != nil {
		return err
	}
	if err := h.inner.Reduce(ctx, m); err != nil {
		return err
	}
	for i, v := range buf {
		h.out[i] += float64(v)
	}
	return nil
}

// TestJoinWithHook: Join with a communication hook. At full rank PowerSGD
// returns the average, so the final parameters are those of the plain-Go
// reference of PyTorch's Join (joinReference). At rank 1 with error
// feedback the joined ranks run the hook on zero gradients (checked) and
// the residuals stay exact: N·Σ outputs + Σ final residuals = Σ of every
// rank's inputs, joined ranks' zeros included.
func TestJoinWithHook(t *testing.T) {
	sizes := []int{5, 3, 7} // one bucket of 15 elements: a 3×5 matrix
	for _, batches := range [][]int{{4, 4, 3}, {5, 0, 5}, {4, 2, 3, 1}} {
		for _, rank := range []int{3, 1} {
			t.Run(fmt.Sprintf("batches=%v/rank=%d", batches, rank), func(t *testing.T) {
				checkJoinHook(t, batches, sizes, rank)
			})
		}
	}
}

func checkJoinHook(t *testing.T, batches, sizes []int, rank int) {
	ranks := len(batches)
	final := make([][]float32, ranks)
	hooks := make([]*asMatrix, ranks)
	resid := make([][]float32, ranks)
	var init [][]float64
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		ps, err := ddp.NewPowerSGD[float32](ddp.PowerSGDConfig{Rank: rank, MinCompressionRate: 1e-9, ErrorFeedback: true, WarmStart: true, Seed: 5})
		if err != nil {
			return err
		}
		h := &asMatrix{inner: ps, rows: 3, cols: 5}
		hooks[r] = h
		n, d := newLinearNet(t, g, sizes, 5, ddp.WithCommHook[float32](h))
		if r == 0 {
			init = paramsOf(d, len(sizes))
		}
		opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: joinLR, Momentum: joinMomentum})
		if err != nil {
			return err
		}
		j, err := d.Join(ddp.JoinOptions{})
		if err != nil {
			return err
		}
		ctx := context.Background()
		if err := runBatches(ctx, n, j, r, batches, func(ctx context.Context) error { return d.Step(ctx, opt) }); err != nil {
			return err
		}
		h.joined = true
		if err := j.Finish(ctx); err != nil {
			return err
		}
		st, err := ps.HookState()
		if err != nil {
			return err
		}
		final[r], resid[r] = append([]float32(nil), d.ParamArena()...), st.Local
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	if rank == 3 {
		requireArenasClose(t, final, sizes, joinReference(init, batches, false))
	}
	// The output is the same on every rank; the inputs and residuals are
	// each rank's own.
	for r, h := range hooks {
		require.False(t, h.nonZero, "rank %d shadowed with a nonzero gradient", r)
	}
	carried := 0.0
	for i := range hooks[0].out {
		lhs, rhs := float64(ranks)*hooks[0].out[i], 0.0
		for r, h := range hooks {
			rhs += h.in[i]
			lhs += float64(resid[r][i])
			carried += math.Abs(float64(resid[r][i]))
		}
		require.InDelta(t, rhs, lhs, 1e-4*(1+math.Abs(rhs)), "element %d", i)
	}
	if rank == 1 {
		require.Greater(t, carried, 0.1, "rank 1 leaves residuals to carry")
	}
}
