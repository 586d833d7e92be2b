package allreduce_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Tests of Tree (dtree.go), and the AllReduce matrix that hd_test.go
// shares: every rank count 1..17 and 32, lengths {0, 1, N-1, N, N+1,
// 1000}, every op and dtype, against the sequential reference, bitwise,
// on every rank, twice (the two runs must agree bit for bit too).

// algoRanks are the rank counts of the algorithm matrices.
var algoRanks = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32}

// tinyTuning makes every segment a few elements long and sends every
// non-empty Broadcast and Reduce by chain, so that the multi-segment and
// large-message paths run on the matrix's small inputs.
var tinyTuning = allreduce.Tuning{TreeSegment: 64, ChainSegment: 96, ChainMin: 1}

// arCell is one collective of an algorithm matrix.
type arCell struct {
	length int
	op     allreduce.ReduceOp
	dt     allreduce.DType
	root   int // Broadcast and Reduce
}

func (c arCell) String() string {
	return fmt.Sprintf("len=%d/op=%v/dtype=%v/root=%d", c.length, c.op, c.dt, c.root)
}

var (
	algoDTypes = []allreduce.DType{allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64}
	algoOps    = []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max, allreduce.Min, allreduce.Prod}
)

// algoHugeLen is the large length: over 1 MiB elements, not a multiple of
// any rank count.
const algoHugeLen = 1<<20 + 3

// algoLens is {0, 1, N-1, N, N+1, 1000} without repeats.
func algoLens(n int) []int {
	var out []int
	for _, l := range []int{0, 1, n - 1, n, n + 1, 1000} {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// allReduceCells is every length × op × dtype (Avg on floats only).
func allReduceCells(n int) []arCell {
	var out []arCell
	for _, l := range algoLens(n) {
		for _, dt := range algoDTypes {
			for _, op := range algoOps {
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

func cellInput[T allreduce.Numeric](c arCell, r int) []T {
	return allreducetest.Input[T](algoSeed+uint64(c.length), r, c.length, c.op)
}

func cellReference[T allreduce.Numeric](c arCell, n int) []T {
	in := make([][]T, n)
	for r := range in {
		in[r] = cellInput[T](c, r)
	}
	return allreducetest.Reduce(in, c.op)
}

func sliceBytes[T allreduce.Numeric](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
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

func allReduceCell[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	buf := cellInput[T](c, g.Rank())
	err := allreduce.AllReduce(ctx, g, buf, c.op)
	return sliceBytes(buf), err
}

func allReduceWant(c arCell, n int) []byte {
	b, _ := byDType(c,
		func() ([]byte, error) { return sliceBytes(cellReference[float32](c, n)), nil },
		func() ([]byte, error) { return sliceBytes(cellReference[float64](c, n)), nil },
		func() ([]byte, error) { return sliceBytes(cellReference[int32](c, n)), nil },
		func() ([]byte, error) { return sliceBytes(cellReference[int64](c, n)), nil })
	return b
}

// world makes the fresh connections of n ranks that a matrix runs on.
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
func checkCells(t *testing.T, mk world, n int, cells []arCell, run func(context.Context, *allreduce.Group, arCell) ([]byte, error),
	want func(c arCell, r int) []byte, opts ...allreduce.GroupOption) {
	t.Helper()
	first := runCells(t, mk, n, cells, run, opts...)
	second := runCells(t, mk, n, cells, run, opts...)
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

func runAllReduceCell(ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
	return byDType(c,
		func() ([]byte, error) { return allReduceCell[float32](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[float64](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[int32](ctx, g, c) },
		func() ([]byte, error) { return allReduceCell[int64](ctx, g, c) })
}

// allReduceMatrix checks algo on the rank counts ranks, plus the huge
// cells (2^20+3 elements) on the rank counts of huge.
func allReduceMatrix(t *testing.T, algo allreduce.Algorithm, ranks, huge []int, opts ...allreduce.GroupOption) {
	opts = append(opts, allreduce.WithAlgorithm(algo))
	for _, n := range ranks {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cells := allReduceCells(n)
			if slices.Contains(huge, n) && !testing.Short() {
				cells = append(cells, arCell{length: algoHugeLen, op: allreduce.Sum, dt: allreduce.Float32, root: -1})
			}
			wants := map[arCell][]byte{}
			checkCells(t, inprocWorld, n, cells, runAllReduceCell, func(c arCell, _ int) []byte {
				if wants[c] == nil {
					wants[c] = allReduceWant(c, n)
				}
				return wants[c]
			}, opts...)
		})
	}
}

// fewRanks are the rank counts of the matrices at the default sizes,
// whose small cells take the same paths as the tiny tuning's with one
// segment.
var fewRanks = []int{2, 3, 4, 5, 8, 17}

// TestTreeMatrix: Tree with segments of a few elements (so every half is
// many segments and the pipeline runs full), and with the default segment
// size (one segment up to 256 KiB; the huge cells have several).
func TestTreeMatrix(t *testing.T) {
	t.Run("tiny-segments", func(t *testing.T) {
		allReduceMatrix(t, allreduce.Tree, algoRanks, nil, allreduce.WithTuning(tinyTuning))
	})
	t.Run("default-segments", func(t *testing.T) {
		allReduceMatrix(t, allreduce.Tree, fewRanks, []int{5})
	})
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
