package allreduce_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// Tests of the large-message Broadcast and Reduce (bcast_large.go,
// reduce_large.go): with tinyTuning every non-empty call goes by chain in
// segments of a few elements; at the default sizes the huge cells do.

// rootedRoots are the roots of a Broadcast or Reduce cell with the tiny
// tuning: all of them up to 5 ranks, else the first, second, middle and
// last.
func rootedRoots(n int) []int {
	if n <= 5 {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return []int{0, 1, n / 2, n - 1}
}

// TestLargeBroadcastReduce is the Broadcast and Reduce matrix with the
// tiny tuning on every rank count 1..17 and 32: every length, op and
// dtype from the roots of rootedRoots, but Reduce above 8 ranks only by
// Sum to roots other than 0 (other-roots); Broadcast must leave every rank
// with the root's input, Reduce the root with the reference and every
// other rank with its input, bit for bit; synchronously (TestMatrix runs
// the async and repeated calls). At the default sizes TestMatrix runs both
// (from every root; huge cells: Reduce on 5 ranks, Broadcast on 8);
// default adds the huge Broadcast on 5 ranks (root 4, float32) and the
// huge Reduce by Max on int64 to root 1.
func TestLargeBroadcastReduce(t *testing.T) {
	rooted := []allreduce.Kind{allreduce.KindBroadcast, allreduce.KindReduce}
	tiny := allreducetest.MatrixConfig{
		Connect:   allreducetest.Inproc(20 * time.Second),
		Options:   []allreduce.GroupOption{allreduce.WithTuning(tinyTuning)},
		FullRanks: 32,
		SyncOnly:  true,
	}
	t.Run("tiny-segments", func(t *testing.T) {
		cfg := tiny
		cfg.Collectives, cfg.Ranks = rooted, algoRanks
		cfg.Roots = func(coll allreduce.Kind, n, _, _ int) []int {
			if coll == allreduce.KindReduce && n > 8 {
				return []int{0}
			}
			return rootedRoots(n)
		}
		allreducetest.Matrix(t, cfg)
	})
	t.Run("other-roots", func(t *testing.T) {
		cfg := tiny
		cfg.Collectives = []allreduce.Kind{allreduce.KindReduce}
		cfg.Ranks = slices.DeleteFunc(slices.Clone(algoRanks), func(n int) bool { return n <= 8 })
		cfg.Ops = []allreduce.ReduceOp{allreduce.Sum}
		cfg.Roots = func(_ allreduce.Kind, n, _, _ int) []int { return rootedRoots(n)[1:] }
		allreducetest.Matrix(t, cfg)
	})
	t.Run("default", func(t *testing.T) {
		if testing.Short() {
			t.Skip("huge cells only")
		}
		allreducetest.Matrix(t, allreducetest.MatrixConfig{
			Connect:     allreducetest.Inproc(20 * time.Second),
			Collectives: rooted,
			SyncOnly:    true,
			Ranks:       []int{5},
			Lengths:     func(int) []int { return nil },
			Huge: func(coll allreduce.Kind, _ allreduce.Algorithm, _ int) ([]allreduce.ReduceOp, []allreduce.DType) {
				if coll == allreduce.KindBroadcast {
					return []allreduce.ReduceOp{0}, []allreduce.DType{allreduce.Float32}
				}
				return []allreduce.ReduceOp{allreduce.Max}, []allreduce.DType{allreduce.Int64}
			},
			Roots: func(coll allreduce.Kind, n, _, _ int) []int {
				if coll == allreduce.KindBroadcast {
					return []int{n - 1}
				}
				return []int{1}
			},
		})
	})
}

// TestLargeMismatch is the mismatch matrix (allreducetest.MismatchCases)
// with the tiny tuning, so that the Broadcast and Reduce in it go by chain
// and Tree's halves are many segments (HalvingDoubling relies on its first
// messages crossing between ring neighbours, not on an agreement step;
// RINGDDP_SOAK=1 checks it on every rank count 2..17 and 32): every rank
// must still get an error naming both calls, never a hang. Tree and HalvingDoubling at the default sizes are in
// TestMismatchMatrix (exactness_test.go) with the others.
func TestLargeMismatch(t *testing.T) {
	for j, algo := range []allreduce.Algorithm{allreduce.Tree, allreduce.HalvingDoubling} {
		t.Run(algo.String(), func(t *testing.T) {
			ranks := []int{2, 3, 4, 5, 6, 7, 8, 12, 17}
			if allreducetest.Soak() {
				ranks = algoRanks[1:]
			}
			for k, n := range ranks {
				for i, m := range allreducetest.MismatchCases(n) {
					if !allreducetest.ThinPair(i, j+k) {
						continue // the race subset: half the pairs
					}
					conns, _, err := allreducetest.InprocConns(n, 20*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					errs := allreducetest.RunMismatch(conns, m, 30*time.Second, allreduce.WithAlgorithm(algo), allreduce.WithTuning(tinyTuning))
					if err := allreducetest.CheckMismatch(m, errs); err != nil {
						t.Fatalf("%d ranks: %v", n, err)
					}
				}
			}
		})
	}
}

// TestExactnessTinyTuning is TestExactnessSpecialValues (random programs
// on ±0, NaN payloads, ±Inf and denormals; bitwise identical on every rank
// and run to run, and the reference) with the tiny tuning, so that Tree's
// pipeline and the Broadcast and Reduce chains see special values too.
func TestExactnessTinyTuning(t *testing.T) {
	perAlgorithm := 1000
	if allreducetest.Soak() {
		perAlgorithm = 10000
	} else if allreducetest.Thin() {
		perAlgorithm = 160 // the race subset: one program on each rank count, run once
	}
	ranks := []int{2, 3, 5, 8}
	for _, algo := range []allreduce.Algorithm{allreduce.Tree, allreduce.HalvingDoubling} {
		t.Run(algo.String(), func(t *testing.T) {
			done := 0
			for p := 0; done < perAlgorithm; p++ {
				n := ranks[p%len(ranks)]
				seed := uint64(p)*0x9e3779b97f4a7c15 + 0x7177 + uint64(algo)
				prog := allreducetest.RandomProgram(seed, n, 40, 2000)
				var runs [2][]allreducetest.Outcome
				for i := range runs {
					if i == 1 && allreducetest.Thin() {
						runs[1] = runs[0] // run to run: the plain go test's check
						break
					}
					conns, _, err := allreducetest.InprocConns(n, 30*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					runs[i], err = allreducetest.RunProgram(conns, prog, time.Minute, allreduce.WithAlgorithm(algo), allreduce.WithTuning(tinyTuning))
					if err != nil {
						t.Fatalf("program %d (seed %#x) on %d ranks: %v", p, seed, n, err)
					}
				}
				if err := allreducetest.CheckProgram(prog, runs[0]); err != nil {
					t.Fatalf("program %d (seed %#x) on %d ranks: %v", p, seed, n, err)
				}
				if err := allreducetest.SameOutcomes(runs[0], runs[1]); err != nil {
					t.Fatalf("program %d (seed %#x) on %d ranks: %v", p, seed, n, err)
				}
				done += len(prog)
			}
		})
	}
}
