package trainer

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/run/rankrun"
)

// Every example of a global batch goes to exactly one rank, the first
// B mod N ranks taking one more, and the weights average to 1.
func TestSplitTilesTheBatch(t *testing.T) {
	for _, c := range [][2]int{{256, 3}, {256, 4}, {7, 7}, {40, 3}, {5, 4}, {1, 1}} {
		batch, n := c[0], c[1]
		global := make([]int, batch)
		for i := range global {
			global[i] = 1000 + i
		}
		seen, sumW := map[int]int{}, 0.0
		for r := range n {
			mine := rankSlice(global, r, n)
			require.Len(t, mine, share(batch, n, r))
			require.NoError(t, checkSlice(mine, global, r, n))
			want := batch / n
			if r < batch%n {
				want++
			}
			require.Equal(t, want, len(mine), "batch %d ranks %d rank %d", batch, n, r)
			for _, i := range mine {
				seen[i]++
			}
			sumW += lossWeight(batch, n, r)
		}
		require.Len(t, seen, batch)
		for i, k := range seen {
			require.Equal(t, 1, k, "example %d", i)
		}
		require.InDelta(t, float64(n), sumW, 1e-12)
	}
	require.ErrorContains(t, checkSlice([]int{1000}, []int{1000, 1001, 1002, 1003, 1004}, 0, 3), "took 1 examples")
}

// stepGradients runs the first step's forward and backward of cfg on
// cfg.Ranks in-process ranks and returns each rank's averaged gradient.
func stepGradients(t *testing.T, cfg Config) [][]float64 {
	w, err := inproc.NewWorld(cfg.Ranks)
	require.NoError(t, err)
	groups := make([]*allreduce.Group, cfg.Ranks)
	for r := range groups {
		groups[r], err = allreduce.NewGroup(w.Conn(r))
		require.NoError(t, err)
	}
	grads := make([][]float64, cfg.Ranks)
	ctx := context.Background()
	errs := rankrun.RunGroups(groups, func(r int, g *allreduce.Group) error {
		wk, err := newWorker[float64](ctx, cfg, g, cfg.Train, cfg.Test, rankEnv{})
		if err != nil {
			return err
		}
		defer wk.close()
		global := wk.whole.Batch(0, cfg.GlobalBatch)
		mine := wk.batch(0, global)
		if err := checkSlice(mine, global, r, cfg.Ranks); err != nil {
			return err
		}
		if err := fill(wk.train, mine, wk.x, wk.y); err != nil {
			return err
		}
		if err := wk.rep.Run(wk.comm, wk.vm); err != nil {
			return err
		}
		grads[r] = append([]float64(nil), wk.d.GradArena()...)
		return nil
	})
	for _, g := range groups {
		_ = g.Close()
	}
	for _, err := range errs {
		require.NoError(t, err)
	}
	return grads
}

// TestUnevenGradientIsTheFullBatchs: 40 examples over 3 ranks (14, 13,
// 13): the averaged gradient is, within float64 rounding, the gradient of
// the global batch's mean loss computed by one process over all 40, and
// bitwise the same on every rank.
func TestUnevenGradientIsTheFullBatchs(t *testing.T) {
	cfg := small()
	cfg.DType = Float64
	cfg.Ranks = 1
	ref := stepGradients(t, cfg)[0]
	cfg.Ranks = 3
	got := stepGradients(t, cfg)
	norm := 0.0
	for _, v := range ref {
		norm = math.Max(norm, math.Abs(v))
	}
	require.Greater(t, norm, 0.0)
	for i, v := range ref {
		require.InDelta(t, v, got[0][i], 1e-13*norm, "element %d", i)
	}
	for r := 1; r < 3; r++ {
		for i := range got[0] {
			require.Equal(t, math.Float64bits(got[0][i]), math.Float64bits(got[r][i]), "rank %d element %d", r, i)
		}
	}
}

// TestUnevenSplitTrainsAsOneProcess: DDP and ZeRO-1 on 3 ranks with a
// global batch of 40 report the same losses and end with the same
// parameters as one rank, in float64, within rounding; every example of
// each epoch used once.
func TestUnevenSplitTrainsAsOneProcess(t *testing.T) {
	run := func(ranks int, zero1 bool) ([]float64, *Result) {
		cfg := small()
		cfg.DType, cfg.Epochs, cfg.Ranks, cfg.Zero1 = Float64, 1, ranks, zero1
		cfg.Optim, cfg.LR, cfg.Momentum = OptimAdam, 1e-3, 0
		var losses []float64
		cfg.OnStep = func(s StepInfo) { losses = append(losses, s.Loss) }
		res, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		return losses, res
	}
	want, ref := run(1, false)
	for _, zero1 := range []bool{false, true} {
		got, res := run(3, zero1)
		require.Len(t, got, len(want))
		for s := range want {
			require.InDelta(t, want[s], got[s], 1e-9*math.Max(1, want[s]), "zero1 %v step %d", zero1, s+1)
		}
		require.Less(t, maxParamDiff(ref.Params, res.Params), 1e-9, "zero1 %v", zero1)
		m := res.Epochs[0]
		require.Equal(t, int64(25*40), m.SamplesUsed)
		require.Equal(t, m.SamplesUsed, m.SamplesDistinct)
	}
}
