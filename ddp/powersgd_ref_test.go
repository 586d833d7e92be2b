package ddp

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// powersgdRef is testdata/powersgd_ref.json, written by
// testdata/powersgd_ref.py from PyTorch's powerSGD_hook.
type powersgdRef struct {
	World   int       `json:"world"`
	Buckets [][][]int `json:"buckets"`
	Cases   []struct {
		Case struct {
			Rank  int     `json:"rank"`
			Start int     `json:"start"`
			Rate  float64 `json:"rate"`
			EF    bool    `json:"ef"`
			Warm  bool    `json:"warm"`
		} `json:"case"`
		// Steps[s][b]: step s, bucket b.
		Steps [][]struct {
			Inputs [][]float32 `json:"inputs"` // by rank
			Out    []float32   `json:"out"`
			Q      []float32   `json:"q"` // the random Qs PyTorch drew in this call, if any
		} `json:"steps"`
	} `json:"cases"`
}

// PowerSGD gives PyTorch's powerSGD_hook's results, step after step, on
// two ranks and two buckets with compressed and uncompressed tensors
// (a 3-D one, biases, a matrix below the compression rate), ranks 1 to 4
// (rank 3 and 4: QR in PyTorch, Gram-Schmidt here), with and without
// error feedback and warm start, starting from the same random Qs.
func TestPowerSGDMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/powersgd_ref.json")
	require.NoError(t, err)
	var ref powersgdRef
	require.NoError(t, json.Unmarshal(raw, &ref))
	require.NotEmpty(t, ref.Cases)
	for ci, c := range ref.Cases {
		t.Run(fmt.Sprintf("rank%d_ef%v_warm%v", c.Case.Rank, c.Case.EF, c.Case.Warm), func(t *testing.T) {
			errs := allreducetest.RunInproc(ref.World, 20*time.Second, func(g *allreduce.Group) error {
				cfg := PowerSGDConfig{Rank: c.Case.Rank, StartIter: c.Case.Start, MinCompressionRate: c.Case.Rate, ErrorFeedback: c.Case.EF, WarmStart: c.Case.Warm}
				h, err := NewPowerSGD[float32](cfg)
				if err != nil {
					return err
				}
				var step, bucket int
				h.initQ = func(q []float32, _ uint64) {
					want := c.Steps[step][bucket].Q
					if len(want) != len(q) {
						panic(fmt.Sprintf("case %d step %d bucket %d: PyTorch drew %d values, the hook wants %d", ci, step, bucket, len(want), len(q)))
					}
					copy(q, want)
				}
				for step = range c.Steps {
					for bucket = range c.Steps[step] {
						rec := c.Steps[step][bucket]
						buf := append([]float32(nil), rec.Inputs[g.Rank()]...)
						b, err := NewGradBucket(g, bucket, bucket == len(ref.Buckets)-1, buf, ref.Buckets[bucket])
						if err != nil {
							return err
						}
						if err := h.Reduce(context.Background(), b); err != nil {
							return err
						}
						if len(rec.Q) > 0 && (c.Case.Warm && step != c.Case.Start) {
							return fmt.Errorf("PyTorch drew Qs at step %d with warm start", step)
						}
						if err := closeTo(buf, rec.Out, 2e-4); err != nil {
							return fmt.Errorf("rank %d step %d bucket %d: %w", g.Rank(), step, bucket, err)
						}
					}
				}
				return nil
			})
			require.NoError(t, allreducetest.FirstError(errs))
		})
	}
}

// closeTo checks got against want elementwise, to tol relative to the
// largest magnitude of want.
func closeTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol*math.Max(scale, 1)) {
			return fmt.Errorf("element %d: %v, PyTorch %v", i, got[i], want[i])
		}
	}
	return nil
}
