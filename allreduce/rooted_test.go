package allreduce_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// Tests of the large-message Broadcast and Reduce (bcast_large.go,
// reduce_large.go): with tinyTuning every non-empty call goes by chain in
// segments of a few elements; at the default sizes the huge cells do.

// rootedRoots are the roots of a rooted cell: all of them up to 5 ranks,
// else the first, second, middle and last.
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

// rootedCells are Broadcast cells (op 0) for every dtype and Reduce cells
// for every op and dtype, over every length and root.
func rootedCells(n int) (bcast, reduce []arCell) {
	for _, l := range algoLens(n) {
		for _, root := range rootedRoots(n) {
			for _, dt := range algoDTypes {
				bcast = append(bcast, arCell{length: l, dt: dt, root: root})
				for _, op := range algoOps {
					if op == allreduce.Avg && !dt.IsFloat() || n > 8 && root > 0 && op != allreduce.Sum {
						continue
					}
					reduce = append(reduce, arCell{length: l, op: op, dt: dt, root: root})
				}
			}
		}
	}
	return bcast, reduce
}

func broadcastCell[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.Broadcast(ctx, g, buf, c.root)
	return sliceBytes(buf), err
}

func reduceCell[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.Reduce(ctx, g, buf, c.op, c.root)
	return sliceBytes(buf), err
}

func runBroadcastCell(ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	return byDType(c,
		func() ([]byte, error) { return broadcastCell[float32](ctx, g, c) },
		func() ([]byte, error) { return broadcastCell[float64](ctx, g, c) },
		func() ([]byte, error) { return broadcastCell[int32](ctx, g, c) },
		func() ([]byte, error) { return broadcastCell[int64](ctx, g, c) })
}

func runReduceCell(ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	return byDType(c,
		func() ([]byte, error) { return reduceCell[float32](ctx, g, c) },
		func() ([]byte, error) { return reduceCell[float64](ctx, g, c) },
		func() ([]byte, error) { return reduceCell[int32](ctx, g, c) },
		func() ([]byte, error) { return reduceCell[int64](ctx, g, c) })
}

// inputBytes is rank r's input of c as bytes.
func inputBytes(c arCell, r int) []byte {
	b, _ := byDType(c,
		func() ([]byte, error) { return sliceBytes(cellInput[float32](c, r)), nil },
		func() ([]byte, error) { return sliceBytes(cellInput[float64](c, r)), nil },
		func() ([]byte, error) { return sliceBytes(cellInput[int32](c, r)), nil },
		func() ([]byte, error) { return sliceBytes(cellInput[int64](c, r)), nil })
	return b
}

// rootedMatrix checks Broadcast (every rank ends with the root's input, bit
// for bit) and Reduce (the root holds the reference, every other rank its
// input unchanged) on the rank counts ranks, run twice, plus the huge
// cells on the rank counts of huge.
func rootedMatrix(t *testing.T, ranks, huge []int, opts ...allreduce.GroupOption) {
	for _, n := range ranks {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			bcast, reduce := rootedCells(n)
			if slices.Contains(huge, n) && !testing.Short() {
				bcast = append(bcast, arCell{length: algoHugeLen, dt: allreduce.Float32, root: n - 1})
				reduce = append(reduce, arCell{length: algoHugeLen, op: allreduce.Max, dt: allreduce.Int64, root: 1})
			}
			t.Run("Broadcast", func(t *testing.T) {
				checkCells(t, inprocWorld, n, bcast, runBroadcastCell, func(c arCell, _ int) []byte { return inputBytes(c, c.root) }, opts...)
			})
			t.Run("Reduce", func(t *testing.T) {
				wants := map[arCell][]byte{}
				checkCells(t, inprocWorld, n, reduce, runReduceCell, func(c arCell, r int) []byte {
					if r != c.root {
						return inputBytes(c, r)
					}
					if wants[c] == nil {
						wants[c] = allReduceWant(c, n)
					}
					return wants[c]
				}, opts...)
			})
		})
	}
}

func TestLargeBroadcastReduce(t *testing.T) {
	t.Run("tiny-segments", func(t *testing.T) { rootedMatrix(t, algoRanks, nil, allreduce.WithTuning(tinyTuning)) })
	t.Run("default", func(t *testing.T) { rootedMatrix(t, []int{2, 3, 5}, []int{5}) })
}

// TestLargeMismatch is the mismatch matrix (allreducetest.MismatchCases)
// with the tiny tuning, so that the Broadcast and Reduce in it go by chain
// and Tree's halves are many segments (HalvingDoubling relies on its first
// messages crossing between ring neighbours, not on an agreement step;
// RINGDDP_SOAK=1 checks it on every rank count 2..17 and 32): every rank
// must still get an error naming both calls, never a hang. Tree and HalvingDoubling at the default sizes are in
// TestMismatchMatrix (exactness_test.go) with the others.
func TestLargeMismatch(t *testing.T) {
	for _, algo := range []allreduce.Algorithm{allreduce.Tree, allreduce.HalvingDoubling} {
		t.Run(algo.String(), func(t *testing.T) {
			ranks := []int{2, 3, 4, 5, 6, 7, 8, 12, 17}
			if allreducetest.Soak() {
				ranks = algoRanks[1:]
			}
			for _, n := range ranks {
				for _, m := range allreducetest.MismatchCases(n) {
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
