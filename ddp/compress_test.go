package ddp

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// Without error feedback the hooks give PyTorch's fp16_compress_hook
// (over gloo) and bf16_compress_hook (its steps, the sum accumulated in
// float32 as NCCL does) bit for bit, on two ranks and values over many
// magnitudes with ties. PyTorch rounds g, then divides the 16-bit value
// by N, rounding again where the quotient is a float16 subnormal; this
// hook rounds g/N once, so there the two may differ by a subnormal's ulp.
func TestCompressionMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/compress_ref.json")
	require.NoError(t, err)
	var ref struct {
		World  int                  `json:"world"`
		Inputs [][]float32          `json:"inputs"`
		Out    map[string][]float32 `json:"out"`
	}
	require.NoError(t, json.Unmarshal(raw, &ref))
	for _, f := range []Half{FP16, BF16} {
		want := ref.Out[f.String()]
		require.NotEmpty(t, want, f.String())
		errs := allreducetest.RunInproc(ref.World, 20*time.Second, func(g *allreduce.Group) error {
			h, err := NewCompression[float32](f, false)
			require.NoError(t, err)
			buf := append([]float32(nil), ref.Inputs[g.Rank()]...)
			b, err := NewGradBucket(g, 0, true, buf, [][]int{{len(buf)}})
			require.NoError(t, err)
			require.NoError(t, h.Reduce(context.Background(), b))
			for i := range buf {
				tiny := false
				for r := range ref.World {
					tiny = tiny || math.Abs(float64(ref.Inputs[r][i]))/float64(ref.World) < 0x1p-14
				}
				if f == FP16 && tiny {
					require.InDelta(t, want[i], buf[i], 0x1p-24*float64(ref.World), "%v element %d", f, i)
					continue
				}
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(buf[i]), "%v element %d: %v, PyTorch %v", f, i, buf[i], want[i])
			}
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs))
	}
}

// Error feedback: the result is bitwise the same on every rank, and the
// applied sum tracks the true one far better than without. The ranks
// hold the same gradient, so that the sum of their payloads (2·c) is
// exact: the rounding of the sum is not fed back (no rank knows it once
// the sum is a 16-bit all-reduce), and with different gradients it would
// be all the error left.
func TestCompressionErrorFeedback(t *testing.T) {
	const ranks, steps, n = 2, 100, 64
	for _, f := range []Half{FP16, BF16} {
		run := func(ef bool) float64 {
			var rel float64
			outs := make([][]float64, ranks)
			errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
				h, err := NewCompression[float64](f, ef)
				require.NoError(t, err)
				grad := randGrads(0, 1, n)
				applied := make([]float64, n)
				for range steps {
					buf := append([]float64(nil), grad...)
					b, err := NewGradBucket(g, 0, true, buf, [][]int{{n}})
					require.NoError(t, err)
					require.NoError(t, h.Reduce(context.Background(), b))
					addTo(applied, buf)
				}
				outs[g.Rank()] = applied
				var num, den float64
				for i := range applied {
					want := grad[i] * steps
					num += (applied[i] - want) * (applied[i] - want)
					den += want * want
				}
				if g.Rank() == 0 {
					rel = math.Sqrt(num / den)
				}
				return nil
			})
			require.NoError(t, allreducetest.FirstError(errs))
			for r := 1; r < ranks; r++ {
				require.Equal(t, outs[0], outs[r], "rank %d's sum differs from rank 0's", r)
			}
			return rel
		}
		with, without := run(true), run(false)
		t.Logf("%v: relative error of the applied sum after %d steps: %.3g with error feedback, %.3g without", f, steps, with, without)
		require.Less(t, with, without/4)
	}
}

// The per-rank identity of error feedback: Σ_t c_t + e_T = Σ_t g_t/N,
// where c_t is this rank's own rounded payload (seen on one rank, where
// the sum is c itself).
func TestCompressionErrorIdentity(t *testing.T) {
	errs := allreducetest.RunInproc(1, 10*time.Second, func(g *allreduce.Group) error {
		h, err := NewCompression[float64](BF16, true)
		require.NoError(t, err)
		sum, truth := make([]float64, 16), make([]float64, 16)
		for s := range 50 {
			buf := randGrads(0, s, 16)
			addTo(truth, buf)
			b, err := NewGradBucket(g, 0, true, buf, [][]int{{16}})
			require.NoError(t, err)
			require.NoError(t, h.Reduce(context.Background(), b))
			addTo(sum, buf)
		}
		for i := range sum {
			require.InDelta(t, truth[i], sum[i]+h.buckets[0].errs[i], 1e-12, "element %d", i)
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	_, err := NewCompression[float32](Half(9), true)
	require.ErrorContains(t, err, "unknown 16-bit format")
}
