package ddp

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// randGrads is rank r's gradient at step s: normal values, distinct per
// rank and step.
func randGrads(r, s, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(s)))
	out := make([]float64, n)
	for i := range out {
		out[i] = rng.NormFloat64()
	}
	return out
}

// At full rank (r = min(n, m)) the approximation P·Qᵀ is the average
// itself: span(P) is all of M's column space (r = m) or P is square and
// orthogonal (r = n). Both shapes, a bias and a 3-D tensor, 3 ranks.
func TestPowerSGDFullRankIsTheAverage(t *testing.T) {
	const ranks = 3
	shapes := [][]int{{7, 4}, {3, 9}, {5}, {2, 3, 4}}
	total := 28 + 27 + 5 + 24
	errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
		cfg := PowerSGDConfig{Rank: 9, MinCompressionRate: 1e-9, WarmStart: true}
		h, err := NewPowerSGD[float64](cfg)
		if err != nil {
			return err
		}
		for s := range 3 {
			buf := randGrads(g.Rank(), s, total)
			b, err := NewGradBucket(g, 0, true, buf, shapes)
			if err != nil {
				return err
			}
			if err := h.Reduce(context.Background(), b); err != nil {
				return err
			}
			st := h.buckets[0]
			if len(st.mats) != 4 {
				// Below rate 1 the bias passes the test too, as in PyTorch (a 5×1 matrix at rank 1).
				t.Errorf("%d matrices compressed, want 4", len(st.mats))
			}
			for i := range buf {
				want := 0.0
				for r := range ranks {
					want += randGrads(r, s, total)[i]
				}
				want /= ranks
				if math.Abs(buf[i]-want) > 1e-12 {
					t.Errorf("rank %d step %d element %d: %v, the average is %v", g.Rank(), s, i, buf[i], want)
					return nil
				}
			}
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// With error feedback what each rank lost to compression is carried into
// the next step: Σ applied + this rank's final error = Σ this rank's
// gradients, exactly up to rounding, so that with a constant gradient the
// applied sum tracks the true sum (relative error shrinking like 1/T)
// while without it rank 1 keeps losing the same part every step.
func TestPowerSGDErrorFeedbackTracksTheSum(t *testing.T) {
	const ranks, steps = 2, 200
	shape := [][]int{{12, 10}}
	run := func(ef bool) (relErr float64) {
		errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
			h, err := NewPowerSGD[float64](PowerSGDConfig{Rank: 1, MinCompressionRate: 1, ErrorFeedback: ef, WarmStart: true})
			if err != nil {
				return err
			}
			grad := randGrads(g.Rank(), 0, 120)
			applied := make([]float64, 120)
			for range steps {
				buf := append([]float64(nil), grad...)
				b, err := NewGradBucket(g, 0, true, buf, shape)
				if err != nil {
					return err
				}
				if err := h.Reduce(context.Background(), b); err != nil {
					return err
				}
				addTo(applied, buf)
			}
			var num, den float64
			for i := range applied {
				want := 0.0
				for r := range ranks {
					want += randGrads(r, 0, 120)[i] * steps
				}
				want /= ranks
				num += (applied[i] - want) * (applied[i] - want)
				den += want * want
				if ef {
					// Σ applied + e_T = Σ g on this rank.
					if d := applied[i] + h.buckets[0].errs[i] - grad[i]*steps; math.Abs(d) > 1e-9 {
						t.Errorf("rank %d element %d: applied sum + error is off this rank's gradient sum by %v", g.Rank(), i, d)
						return nil
					}
				}
			}
			if g.Rank() == 0 {
				relErr = math.Sqrt(num / den)
			}
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
		return relErr
	}
	with, without := run(true), run(false)
	t.Logf("relative error of the applied sum after %d steps: %.3g with error feedback, %.3g without", steps, with, without)
	require.Less(t, with, 0.05)
	require.Greater(t, without, 0.3)
}

// Bad configurations are refused with the field named.
func TestPowerSGDConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  PowerSGDConfig
		want string
	}{
		{PowerSGDConfig{Rank: 0, MinCompressionRate: 2}, "rank 0"},
		{PowerSGDConfig{Rank: 1, StartIter: -1, MinCompressionRate: 2}, "start iteration -1"},
		{PowerSGDConfig{Rank: 1, MinCompressionRate: math.NaN()}, "minimum compression rate NaN"},
		{PowerSGDConfig{Rank: 1, MinCompressionRate: 2, OrthogonalizationEpsilon: -1}, "epsilon -1"},
	} {
		_, err := NewPowerSGD[float32](c.cfg)
		require.ErrorContains(t, err, c.want)
	}
}

// A zero column stays zero instead of becoming NaN; the others come out
// orthonormal.
func TestOrthogonalize(t *testing.T) {
	a := []float64{3, 0, 1, 4, 0, 1, 0, 0, 5} // 3×3, column 1 zero
	orthogonalize(a, 3, 3, 0, make([]float64, 3))
	col := func(j int) []float64 { return []float64{a[j], a[3+j], a[6+j]} }
	dot := func(x, y []float64) float64 { return x[0]*y[0] + x[1]*y[1] + x[2]*y[2] }
	require.Equal(t, []float64{0, 0, 0}, col(1))
	require.InDelta(t, 1, dot(col(0), col(0)), 1e-15)
	require.InDelta(t, 1, dot(col(2), col(2)), 1e-15)
	require.InDelta(t, 0, dot(col(0), col(2)), 1e-15)
}

// addTo adds src into dst, element by element.
func addTo[T Float](dst, src []T) {
	for i, v := range src {
		dst[i] += v
	}
}
