package allreduce_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// The halving-doubling ReduceScatter and AllGather, rows of the schedule
// table that a group reaches by asking (WithSchedule), give what the
// ring's give, on every rank and any number of ranks: a ReduceScatter of
// integers (exact whatever the order), then an AllGather of its chunks.
func TestScheduleRowsHalvesMatchRing(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for _, count := range []int{0, 1, n, 3*n + 1} {
			results := map[string][][]int64{}
			for _, name := range []string{"ring", "hd"} {
				got := make([][]int64, n)
				errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
					ctx := context.Background()
					r := g.Rank()
					src := make([]int64, count)
					for i := range src {
						src[i] = int64((r+1)*1000 + i)
					}
					lo, hi := allreduce.ChunkBounds(count, n, r)
					mine := make([]int64, hi-lo)
					if err := allreduce.ReduceScatter(ctx, g, mine, src, allreduce.Sum); err != nil {
						return err
					}
					all := make([]int64, count)
					if err := allreduce.AllGather(ctx, g, all, mine); err != nil {
						return err
					}
					got[r] = all
					return nil
				}, allreduce.WithSchedule(allreduce.KindReduceScatter, name), allreduce.WithSchedule(allreduce.KindAllGather, name))
				allreducetest.RequireNoErrors(t, errs)
				results[name] = got
			}
			for r := range n {
				if fmt.Sprint(results["hd"][r]) != fmt.Sprint(results["ring"][r]) {
					t.Fatalf("n=%d count=%d rank %d: hd %v, ring %v", n, count, r, results["hd"][r], results["ring"][r])
				}
			}
		}
	}
}

// WithSchedule refuses a name its collective has no row for.
func TestWithScheduleUnknown(t *testing.T) {
	errs := allreducetest.RunInproc(2, 5*time.Second, func(*allreduce.Group) error { return nil },
		allreduce.WithSchedule(allreduce.KindAllGather, "chain"))
	if allreducetest.FirstError(errs) == nil {
		t.Fatal("an AllGather by chain: no error")
	}
}

// The rows Auto picks from: every AllReduce algorithm's prediction is the
// one PredictAlgorithm gives, and Choose's pick is the least of them.
func TestChooseIsTheLeastPrediction(t *testing.T) {
	m := cost.DefaultModel(false)
	for _, s := range []cost.Shape{cost.FlatShape(4), cost.NodesShape(7, 3), cost.NodesShape(16, 4)} {
		for b := 1; b <= 64<<20; b *= 8 {
			best := math.Inf(1)
			for _, p := range allreduce.Predict(m, s, b) {
				if t2, ok := allreduce.PredictAlgorithm(m, s, p.Algorithm, b); !ok || t2 != p.Seconds {
					t.Fatalf("%+v %d B: %v: Predict %v, PredictAlgorithm %v %v", s, b, p.Algorithm, p.Seconds, t2, ok)
				}
				best = min(best, p.Seconds)
			}
			got, _ := allreduce.PredictAlgorithm(m, s, allreduce.Choose(m, s, b), b)
			if got > best*(1+1e-9) {
				t.Errorf("%+v %d B: Choose's pick %v s, the least %v s", s, b, got, best)
			}
		}
	}
}
