package allreduce_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/run/reference"
)

// TestMatrix is the collective matrix of allreducetest (the same suite
// tcp runs reduced) on in-process ranks: every collective on ranks
// {1, 2, 3, 4, 5, 7, 8, 13, 16}, AllReduce with every algorithm also on
// 17 and 32 (one cell per length there, op and dtype rotating), lengths {0, 1, N-1, N, N+1, 1000} and the huge cells of
// allreducetest.DefaultHuge (2^20+3), every op and dtype (float16 and
// bfloat16 thinner: one cell per length each, the op rotating), sync, async,
// repeated and aliased, Broadcast and Reduce from every root, Avg on
// integers an error; bitwise against the sequential reference. The world
// has nodes of 3 ranks (the last smaller), so the topology-aware
// algorithms run too.
func TestMatrix(t *testing.T) {
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect:        allreducetest.Inproc(20*time.Second, inproc.WithLocalSize(testMatrixLocalSize)),
		AllReduceRanks: []int{17, 32},
		Huge:           allreducetest.DefaultHuge,
	})
}

// testMatrixLocalSize is TestMatrix's node size, for hierarchy_test.go,
// which adds the others.
const testMatrixLocalSize = 3

// TestAllReduceOneShotBoundary runs Direct around the size where it
// switches from one-shot to two-shot (32 KiB: 4096 elements of 8 bytes,
// 8192 of 4, 16384 of 2), which the matrix lengths do not reach except at
// the huge one.
func TestAllReduceOneShotBoundary(t *testing.T) {
	around := func(elemSize int) []int { return []int{32<<10/elemSize - 1, 32 << 10 / elemSize, 32<<10/elemSize + 1} }
	cfg := allreducetest.MatrixConfig{
		Connect:     allreducetest.Inproc(20 * time.Second),
		Collectives: []allreduce.Kind{allreduce.KindAllReduce},
		Algorithms:  []allreduce.Algorithm{allreduce.Direct},
		Ranks:       []int{2, 7},
		Lengths:     func(int) []int { return append(around(8), around(4)...) },
		Ops:         []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max},
		NoHalf:      true,
	}
	t.Run("wide", func(t *testing.T) { allreducetest.Matrix(t, cfg) })
	cfg.DTypes, cfg.Lengths = allreducetest.AllHalfDTypes, func(int) []int { return around(2) }
	t.Run("16-bit", func(t *testing.T) { allreducetest.Matrix(t, cfg) })
}

// allOps is every operator, for async_test.go.
var allOps = allreducetest.AllOps

// TestAllReduceRandomFloats reduces non-integer data, where the order of
// reduction matters, and compares with the reference within a relative
// tolerance (Max and Min exactly). It also checks that every rank ends
// bitwise identical.
func TestAllReduceRandomFloats(t *testing.T) {
	for i, n := range []int{2, 3, 5, 8, 13} {
		for j, length := range []int{1, 7, 1000, 4099} {
			for k, op := range allreducetest.AllOps {
				if allreducetest.Thin() && k != (i+j)%len(allreducetest.AllOps) {
					continue // the race subset: one op per cell, rotating
				}
				t.Run(fmt.Sprintf("ranks=%d/len=%d/op=%v/dtype=float32", n, length, op), func(t *testing.T) {
					randomFloatCase[float32](t, n, length, op, 2e-6)
				})
				t.Run(fmt.Sprintf("ranks=%d/len=%d/op=%v/dtype=float64", n, length, op), func(t *testing.T) {
					randomFloatCase[float64](t, n, length, op, 1e-14)
				})
			}
		}
	}
}

// randomFloats makes rank's random floats: normal values, or for Prod
// values in [0.5, 1.5) so that products neither overflow nor vanish.
func randomFloats[T float32 | float64](seed uint64, rank, n int, op allreduce.ReduceOp) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1000))
	out := make([]T, n)
	for i := range out {
		if op == allreduce.Prod {
			out[i] = T(0.5 + rng.Float64())
		} else {
			out[i] = T(rng.NormFloat64() * 100)
		}
	}
	return out
}

// runRandom all-reduces random floats once on a fresh world and returns every
// rank's result.
func runRandom[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp, seed uint64) (inputs, outs [][]T) {
	t.Helper()
	inputs = make([][]T, n)
	outs = make([][]T, n)
	for r := range inputs {
		inputs[r] = randomFloats[T](seed, r, length, op)
		outs[r] = slices.Clone(inputs[r])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		return allreduce.AllReduce(ctx, g, outs[g.Rank()], op)
	})
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatal(err)
	}
	return inputs, outs
}

func randomFloatCase[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp, rel float64) {
	seed := uint64(n*1_000_003 + length*31 + int(op))
	inputs, outs := runRandom[T](t, n, length, op, seed)
	ref := reference.Reduce(inputs, op)
	for r := 1; r < n; r++ {
		if err := allreducetest.DiffBits(fmt.Sprintf("rank %d vs rank 0", r), outs[r], outs[0]); err != nil {
			t.Fatalf("ranks differ: %v", err)
		}
	}
	got := outs[0]
	for i := range ref {
		g, w := float64(got[i]), float64(ref[i])
		switch op {
		case allreduce.Max, allreduce.Min:
			if g != w {
				t.Fatalf("element %d: got %v, want exactly %v", i, g, w)
			}
		case allreduce.Sum, allreduce.Avg:
			// Bound the rounding error by the magnitude of the terms, not of
			// the (possibly cancelling) sum.
			var mag float64
			for r := range inputs {
				mag += math.Abs(float64(inputs[r][i]))
			}
			if op == allreduce.Avg {
				mag /= float64(n)
			}
			if math.Abs(g-w) > rel*float64(n)*mag {
				t.Fatalf("element %d: got %v, want %v (within %g of %g)", i, g, w, rel*float64(n), mag)
			}
		case allreduce.Prod:
			if math.Abs(g-w) > rel*float64(n)*math.Abs(w) {
				t.Fatalf("element %d: got %v, want %v (relative %g)", i, g, w, rel*float64(n))
			}
		}
	}
}

// TestAllReduceFloatDeterministic checks that float all-reduce of random
// (non-integer) data is bitwise identical on every rank and across two runs
// on fresh worlds: the reduction order of each chunk is fixed.
func TestAllReduceFloatDeterministic(t *testing.T) {
	for i, n := range []int{2, 3, 4, 7, 16} {
		for j, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Prod} {
			if allreducetest.Thin() && j != i%3 {
				continue // the race subset: one op per rank count, rotating
			}
			t.Run(fmt.Sprintf("ranks=%d/op=%v/dtype=float32", n, op), func(t *testing.T) {
				floatDeterministic[float32](t, n, 10007, op)
			})
			t.Run(fmt.Sprintf("ranks=%d/op=%v/dtype=float64", n, op), func(t *testing.T) {
				floatDeterministic[float64](t, n, 10007, op)
			})
		}
	}
}

func floatDeterministic[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp) {
	seed := uint64(99 + n)
	_, first := runRandom[T](t, n, length, op, seed)
	_, second := runRandom[T](t, n, length, op, seed)
	for r := range first {
		if err := allreducetest.DiffBits(fmt.Sprintf("rank %d vs rank 0", r), first[r], first[0]); err != nil {
			t.Fatalf("first run: %v", err)
		}
		if err := allreducetest.DiffBits(fmt.Sprintf("rank %d, second run vs first", r), second[r], first[r]); err != nil {
			t.Fatal(err)
		}
	}
	// The data really is order-sensitive: summing in another order changes
	// some element, so the equality above is not vacuous.
	if op == allreduce.Sum && n >= 3 {
		inputs := make([][]T, n)
		for r := range inputs {
			inputs[r] = randomFloats[T](seed, r, length, op)
		}
		fwd := reference.Reduce(inputs, op)
		slices.Reverse(inputs)
		rev := reference.Reduce(inputs, op)
		if allreducetest.DiffBits("reverse", rev, fwd) == nil {
			t.Logf("note: reversing the summation order changed nothing for ranks=%d", n)
		}
	}
}

// TestBarrier checks that no rank leaves a Barrier before every rank has
// entered it, for ranks arriving at different times.
func TestBarrier(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			var mu sync.Mutex
			var lastIn [3]time.Time // per round: a fast rank's next round must not count
			out := make([]time.Time, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := allreducetest.RunInproc(n, 5*time.Second, func(g *allreduce.Group) error {
				for round := range 3 {
					time.Sleep(time.Duration((g.Rank()*7+round*3)%5) * 5 * time.Millisecond)
					mu.Lock()
					if in := time.Now(); in.After(lastIn[round]) {
						lastIn[round] = in
					}
					mu.Unlock()
					if err := allreduce.Barrier(ctx, g); err != nil {
						return err
					}
					now := time.Now()
					mu.Lock()
					early := now.Before(lastIn[round])
					out[g.Rank()] = now
					mu.Unlock()
					if early {
						return fmt.Errorf("round %d: left the barrier before the last rank entered", round)
					}
				}
				return nil
			})
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Named element types are reduced as their underlying types.
type (
	myF32 float32
	myF64 float64
	myI32 int32
	myI64 int64
)

func TestNamedElementTypes(t *testing.T) {
	require.Equal(t, allreduce.Float32, allreduce.DTypeOf[myF32]())
	require.Equal(t, allreduce.Float64, allreduce.DTypeOf[myF64]())
	require.Equal(t, allreduce.Int32, allreduce.DTypeOf[myI32]())
	require.Equal(t, allreduce.Int64, allreduce.DTypeOf[myI64]())
	connect := allreducetest.Inproc(5*time.Second, inproc.WithLocalSize(2))
	for _, algo := range allreducetest.AlgorithmsFor(connect(t, 1)[0]) {
		errs := allreducetest.RunRanks(connect(t, 3), func(g *allreduce.Group) error {
			ctx := context.Background()
			f := []myF32{1.5, myF32(g.Rank())}
			if err := allreduce.AllReduce(ctx, g, f, allreduce.Avg); err != nil {
				return err
			}
			if f[0] != 1.5 || f[1] != 1 {
				return fmt.Errorf("myF32 Avg: got %v, want [1.5 1]", f)
			}
			i := []myI64{myI64(g.Rank()), 10}
			if err := allreduce.AllReduce(ctx, g, i, allreduce.Max); err != nil {
				return err
			}
			if i[0] != 2 || i[1] != 10 {
				return fmt.Errorf("myI64 Max: got %v, want [2 10]", i)
			}
			return nil
		}, allreduce.WithAlgorithm(algo))
		require.NoError(t, allreducetest.FirstError(errs), "algo=%v", algo)
	}
}
