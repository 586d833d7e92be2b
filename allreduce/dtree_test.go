package allreduce_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
	"github.com/ringddp/ringddp/numeric"
)

// Tests of Tree (dtree.go). Its AllReduce matrix is allreducetest.Matrix
// with the tiny tuning; TestAlgorithmsOverTCP and hd_test.go's
// TestHalvingDoublingHalves share the cell helpers below.

// algoRanks are the rank counts of the algorithm matrices: 1..17 and 32.
var algoRanks = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32}

// tinyTuning makes every segment a few elements long and sends every
// non-empty Broadcast and Reduce by chain, so that the multi-segment and
// large-message paths run on the matrix's small inputs.
var tinyTuning = allreduce.Tuning{TreeSegment: 64, ChainSegment: 96, ChainMin: 1}

// TestTreeMatrix is the AllReduce matrix of Tree (every rank count 1..17
// and 32, each with every length, op and dtype, synchronously) with
// segments of a few elements, so that every half is many segments and the
// pipeline runs full. At the default segment size (one segment up to 256
// KiB; its huge cell on 5 ranks has several) TestMatrix runs Tree, async
// and repeated calls too; default-segments adds every op and dtype on 17
// ranks, where TestMatrix runs one per length.
func TestTreeMatrix(t *testing.T) {
	tree := []allreduce.Algorithm{allreduce.Tree}
	allReduce := []allreduce.Kind{allreduce.KindAllReduce}
	t.Run("tiny-segments", func(t *testing.T) {
		allreducetest.Matrix(t, allreducetest.MatrixConfig{
			Connect:     allreducetest.Inproc(20 * time.Second),
			Options:     []allreduce.GroupOption{allreduce.WithTuning(tinyTuning)},
			Collectives: allReduce,
			Algorithms:  tree,
			Ranks:       algoRanks,
			FullRanks:   32,
			SyncOnly:    true,
		})
	})
	t.Run("default-segments", func(t *testing.T) {
		allreducetest.Matrix(t, allreducetest.MatrixConfig{
			Connect:     allreducetest.Inproc(20 * time.Second),
			Collectives: allReduce,
			Algorithms:  tree,
			Ranks:       []int{17},
			FullRanks:   17,
			SyncOnly:    true,
		})
	})
}

// arCell is one collective of a cell list (TestAlgorithmsOverTCP,
// TestHalvingDoublingHalves).
type arCell struct {
	length int
	op     allreduce.ReduceOp
	dt     allreduce.DType
	root   int // Broadcast and Reduce
}

func (c arCell) String() string {
	return fmt.Sprintf("len=%d/op=%v/dtype=%v/root=%d", c.length, c.op, c.dt, c.root)
}

// allReduceCells is every length × op × dtype of the matrix on n ranks
// (Avg on floats only).
// thinCells is cells on n ranks as the race subset runs them
// (allreducetest.Thin): all of them up to 3 ranks, above one per length,
// the i-th length's the i-th of its cells (wrapping), so that every length
// still runs on every rank count; all of them outside the subset.
func thinCells(n int, cells []arCell) []arCell {
	if !allreducetest.Thin() || n <= 3 {
		return cells
	}
	var lengths []int
	byLen := map[int][]arCell{}
	for _, c := range cells {
		if byLen[c.length] == nil {
			lengths = append(lengths, c.length)
		}
		byLen[c.length] = append(byLen[c.length], c)
	}
	out := make([]arCell, len(lengths))
	for i, l := range lengths {
		out[i] = byLen[l][i%len(byLen[l])]
	}
	return out
}

func allReduceCells(n int) []arCell {
	var out []arCell
	for _, l := range allreducetest.MatrixLengths(n) {
		for _, dt := range allreducetest.AllDTypes {
			for _, op := range allreducetest.AllOps {
				if op == allreduce.Avg && !dt.IsFloat() {
					continue
				}
				out = append(out, arCell{length: l, op: op, dt: dt, root: -1})
			}
		}
	}
	return out
}

const algoSeed = 0xa160

func cellInput[T numeric.Arith](c arCell, r int) []T {
	return reference.Input[T](algoSeed+uint64(c.length), r, c.length, c.op)
}

func cellReference[T numeric.Arith](c arCell, n int) []T {
	in := make([][]T, n)
	for r := range in {
		in[r] = cellInput[T](c, r)
	}
	return reference.Reduce(in, c.op)
}

// byDType runs the generic f for c's dtype.
func byDType(c arCell, f32, f64, i32, i64 func() ([]byte, error)) ([]byte, error) {
	switch c.dt {
	case allreduce.Float32:
		return f32()
	case allreduce.Float64:
		return f64()
	case allreduce.Int32:
		return i32()
	}
	return i64()
}

func allReduceCell[T numeric.Arith](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.AllReduce(ctx, g, buf, c.op)
	return allreducetest.Bytes(buf), err
}

func allReduceWant(c arCell, n int) []byte {
	b, _ := byDType(c,
		func() ([]byte, error) { return allreducetest.Bytes(cellReference[float32](c, n)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellReference[float64](c, n)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellReference[int32](c, n)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellReference[int64](c, n)), nil })
	return b
}

func broadcastCell[T numeric.Arith](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.Broadcast(ctx, g, buf, c.root)
	return allreducetest.Bytes(buf), err
}

func reduceCell[T numeric.Arith](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.Reduce(ctx, g, buf, c.op, c.root)
	return allreducetest.Bytes(buf), err
}

func runAllReduceCell(ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	return byDType(c,
		func() ([]byte, error) { return allReduceCell[float32](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[float64](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[int32](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[int64](ctx, g, c) })
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
		func() ([]byte, error) { return allreducetest.Bytes(cellInput[float32](c, r)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellInput[float64](c, r)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellInput[int32](c, r)), nil },
		func() ([]byte, error) { return allreducetest.Bytes(cellInput[int64](c, r)), nil })
	return b
}

// world makes the fresh connections of n ranks that a cell list runs on.
type world func(t *testing.T, n int) []transport.Conn

// inprocWorld is a fresh in-process world.
func inprocWorld(t *testing.T, n int) []transport.Conn {
	conns, _, err := allreducetest.InprocConns(n, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return conns
}

// runCells runs cells in order on a fresh world of n ranks and returns
// what each rank holds after each (by rank, then cell).
func runCells(t *testing.T, mk world, n int, cells []arCell, run func(context.Context, *allreduce.Group, arCell) ([]byte, error), opts ...allreduce.GroupOption) [][][]byte {
	t.Helper()
	out := make([][][]byte, n)
	errs := allreducetest.RunRanks(mk(t, n), func(g *allreduce.Group) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, c := range cells {
			b, err := run(ctx, g, c)
			if err != nil {
				return fmt.Errorf("%v: %w", c, err)
			}
			out[g.Rank()] = append(out[g.Rank()], slices.Clone(b))
		}
		return nil
	}, opts...)
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCells runs cells twice and checks every rank's result of each
// against want(cell, rank) bitwise, and the two runs against each other.
// In the race subset (allreducetest.Thin) it runs them once: run to run
// is the plain go test's check.
func checkCells(t *testing.T, mk world, n int, cells []arCell, run func(context.Context, *allreduce.Group, arCell) ([]byte, error),
	want func(c arCell, r int) []byte, opts ...allreduce.GroupOption) {
	t.Helper()
	first := runCells(t, mk, n, cells, run, opts...)
	second := first
	if !allreducetest.Thin() {
		second = runCells(t, mk, n, cells, run, opts...)
	}
	for i, c := range cells {
		for r := 0; r < n; r++ {
			w := want(c, r)
			if w != nil && !bytes.Equal(first[r][i], w) {
				t.Fatalf("%d ranks, %v: rank %d's result differs from the reference at byte %d", n, c, r, byteDiff(first[r][i], w))
			}
			if !bytes.Equal(first[r][i], second[r][i]) {
				t.Fatalf("%d ranks, %v: rank %d: two runs differ at byte %d", n, c, r, byteDiff(first[r][i], second[r][i]))
			}
		}
	}
}

func byteDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestTreeShape checks the double binary tree for every N up to 80: each
// tree spans the ranks with one root, parents and children agree, levels
// fall towards the leaves (the schedule relies on it), when N is even no
// rank is interior in both trees (NCCL's mirror), and no rank has more than
// 4 links (the cost in dtree.go's comment).
func TestTreeShape(t *testing.T) {
	for n := 1; n <= 80; n++ {
		var interior [2][]bool
		for tr := 0; tr < 2; tr++ {
			interior[tr] = make([]bool, n)
			roots := 0
			for r := 0; r < n; r++ {
				p, ch, lvl := allreduce.DTreeNode(n, r, tr)
				if p < 0 {
					roots++
				} else {
					_, pch, plvl := allreduce.DTreeNode(n, p, tr)
					if pch[0] != r && pch[1] != r {
						t.Fatalf("n=%d tree %d: rank %d's parent %d does not list it (%v)", n, tr, r, p, pch)
					}
					if plvl <= lvl {
						t.Fatalf("n=%d tree %d: rank %d (level %d) has parent %d of level %d", n, tr, r, lvl, p, plvl)
					}
				}
				for _, c := range ch {
					if c < 0 {
						continue
					}
					interior[tr][r] = true
					if cp, _, _ := allreduce.DTreeNode(n, c, tr); cp != r {
						t.Fatalf("n=%d tree %d: rank %d lists child %d whose parent is %d", n, tr, r, c, cp)
					}
				}
			}
			if roots != 1 {
				t.Fatalf("n=%d tree %d: %d roots", n, tr, roots)
			}
			// Every rank reaches the root.
			for r := 0; r < n; r++ {
				x, hops := r, 0
				for ; x >= 0 && hops <= n; hops++ {
					x, _, _ = allreduce.DTreeNode(n, x, tr)
				}
				if hops > n {
					t.Fatalf("n=%d tree %d: rank %d is on a cycle", n, tr, r)
				}
			}
		}
		for r := 0; r < n; r++ {
			if interior[0][r] && interior[1][r] && n%2 == 0 {
				t.Fatalf("n=%d: rank %d is interior in both trees", n, r)
			}
			// The documented cost: at most 4 links (2M bytes sent) per rank.
			links := 0
			for tr := 0; tr < 2; tr++ {
				p, ch, _ := allreduce.DTreeNode(n, r, tr)
				for _, x := range []int{p, ch[0], ch[1]} {
					if x >= 0 {
						links++
					}
				}
			}
			if links > 4 {
				t.Fatalf("n=%d: rank %d has %d tree links, want at most 4", n, r, links)
			}
		}
	}
}

// tcpWorld is n tcp ranks on loopback in this process.
func tcpWorld(t *testing.T, n int) []transport.Conn {
	t.Helper()
	store := rendezvous.NewMemStore()
	conns := make([]transport.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tcp.Dial(context.Background(), tcp.Config{Rank: r, Size: n, Store: store,
				Secret: []byte("algorithm matrix"), Timeout: 20 * time.Second, ConnectTimeout: 20 * time.Second})
			conns[r], errs[r] = c, err
		}()
	}
	wg.Wait()
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatal(err)
	}
	return conns
}

// TestAlgorithmsOverTCP is the reduced matrix over tcp ranks (2..5, in
// this process): Tree and HalvingDoubling AllReduce, and the Broadcast and
// Reduce chains, with the tiny tuning, lengths {0, 1, N+1, 1000}, Sum
// float32, Avg float64 and Max int64, against the reference and run to run.
func TestAlgorithmsOverTCP(t *testing.T) {
	for n := 2; n <= 5; n++ {
		var cells, bcast, reduce []arCell
		for _, l := range []int{0, 1, n + 1, 1000} {
			for _, c := range []arCell{{op: allreduce.Sum, dt: allreduce.Float32}, {op: allreduce.Avg, dt: allreduce.Float64}, {op: allreduce.Max, dt: allreduce.Int64}} {
				c.length, c.root = l, -1
				cells = append(cells, c)
				c.root = l % n
				reduce = append(reduce, c)
				c.op = 0
				bcast = append(bcast, c)
			}
		}
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cells, bcast, reduce := thinCells(n, cells), thinCells(n, bcast), thinCells(n, reduce)
			for _, algo := range []allreduce.Algorithm{allreduce.Tree, allreduce.HalvingDoubling} {
				opts := []allreduce.GroupOption{allreduce.WithAlgorithm(algo), allreduce.WithTuning(tinyTuning)}
				checkCells(t, tcpWorld, n, cells, runAllReduceCell, func(c arCell, _ int) []byte { return allReduceWant(c, n) }, opts...)
			}
			opts := allreduce.WithTuning(tinyTuning)
			checkCells(t, tcpWorld, n, bcast, runBroadcastCell, func(c arCell, _ int) []byte { return inputBytes(c, c.root) }, opts)
			checkCells(t, tcpWorld, n, reduce, runReduceCell, func(c arCell, r int) []byte {
				if r != c.root {
					return inputBytes(c, r)
				}
				return allReduceWant(c, n)
			}, opts)
		})
	}
}
