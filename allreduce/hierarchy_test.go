package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The topology-aware algorithms (Hierarchical, Torus, Mesh) on in-process
// ranks with a simulated topology (inproc.WithLocalSize: nodes of k
// consecutive ranks, the last smaller when k does not divide N), against
// the sequential reference. Test names match 'Hier|Torus|Mesh'.

var topologyAlgorithms = []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}

// hierRanks is ranks 1..17 and 32.
func hierRanks() []int {
	out := make([]int, 0, 18)
	for n := 1; n <= 17; n++ {
		out = append(out, n)
	}
	return append(out, 32)
}

var hierLocalSizes = []int{1, 2, 3, 4}

// topoConns is an in-process world of n ranks on nodes of localSize
// consecutive ranks.
func topoConns(t testing.TB, n, localSize int) []transport.Conn {
	t.Helper()
	w, err := inproc.NewWorld(n, inproc.WithTimeout(30*time.Second), inproc.WithLocalSize(localSize))
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]transport.Conn, n)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	return conns
}

// hierCall is one AllReduce of a program: its length, op and dtype.
type hierCall struct {
	length int
	op     allreduce.ReduceOp
	dtype  allreduce.DType
}

func (c hierCall) String() string { return fmt.Sprintf("%v×%d %v", c.dtype, c.length, c.op) }

var hierDTypes = []allreduce.DType{allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64}

// hierProgram is the calls of one world of n ranks: lengths {0, 1, N-1, N,
// N+1, 1000}, each with every op and dtype up to 8 ranks and a rotating
// pair of them above (seed picks the rotation), Avg on floats only.
func hierProgram(n, seed int) []hierCall {
	var out []hierCall
	full := n <= 8 && !testing.Short()
	i := seed
	for _, length := range matrixLens(n) {
		var combos []hierCall
		for _, op := range allOps {
			for _, dt := range hierDTypes {
				if op == allreduce.Avg && !dt.IsFloat() {
					continue
				}
				combos = append(combos, hierCall{length, op, dt})
			}
		}
		if full {
			out = append(out, combos...)
			continue
		}
		for range 2 {
			out = append(out, combos[i%len(combos)])
			i += 7
		}
	}
	return out
}

// TestHierTorusMeshMatrix: every topology-aware algorithm × ranks 1..17
// and 32 × local sizes {1, 2, 3, 4} (uneven last node wherever the local
// size does not divide N) × lengths {0, 1, N-1, N, N+1, 1000}, every op
// and dtype up to 8 ranks and a rotating subset above; each result equal
// to the sequential reference and bitwise identical on every rank.
func TestHierTorusMeshMatrix(t *testing.T) {
	for _, algo := range topologyAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			for _, n := range hierRanks() {
				for _, k := range hierLocalSizes {
					if k > n && k > 1 {
						continue // the same one-node world as k = n
					}
					prog := hierProgram(n, n*5+k)
					t.Run(fmt.Sprintf("ranks=%d/local=%d", n, k), func(t *testing.T) {
						t.Parallel()
						runHierProgram(t, algo, n, k, prog)
					})
				}
			}
		})
	}
}

// TestHierTorusMeshHuge: the 2^20+3-element length on a few cells, where
// the sub-groups' all-reduces take the ring and Reduce and Broadcast the
// pipelined chains.
func TestHierTorusMeshHuge(t *testing.T) {
	cells := []struct {
		algo allreduce.Algorithm
		n, k int
		op   allreduce.ReduceOp
		dt   allreduce.DType
	}{
		{allreduce.Hierarchical, 8, 3, allreduce.Sum, allreduce.Float32},
		{allreduce.Hierarchical, 5, 2, allreduce.Avg, allreduce.Float64},
		{allreduce.Torus, 7, 3, allreduce.Sum, allreduce.Float32},
		{allreduce.Torus, 8, 4, allreduce.Max, allreduce.Int64},
		{allreduce.Mesh, 5, 2, allreduce.Sum, allreduce.Float32},
		{allreduce.Mesh, 7, 4, allreduce.Min, allreduce.Int32},
	}
	if testing.Short() {
		cells = cells[2:3]
	}
	for _, c := range cells {
		t.Run(fmt.Sprintf("%v/ranks=%d/local=%d/%v/%v", c.algo, c.n, c.k, c.op, c.dt), func(t *testing.T) {
			runHierProgram(t, c.algo, c.n, c.k, []hierCall{{hugeLen, c.op, c.dt}})
		})
	}
}

// runHierProgram runs prog's AllReduces one after another on one group per
// rank of a world of n ranks on nodes of k, and checks each.
func runHierProgram(t *testing.T, algo allreduce.Algorithm, n, k int, prog []hierCall) {
	t.Helper()
	outs := make([][][]byte, n) // rank → call → result bytes
	errs := allreducetest.RunRanks(topoConns(t, n, k), func(g *allreduce.Group) error {
		ctx, cancel := allreducetest.Ctx(2 * time.Minute)
		defer cancel()
		for i, c := range prog {
			out, err := hierAllReduce(ctx, g, c, uint64(i))
			if err != nil {
				return fmt.Errorf("call %d (%v): %w", i, c, err)
			}
			outs[g.Rank()] = append(outs[g.Rank()], out)
		}
		return nil
	}, allreduce.WithAlgorithm(algo))
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatal(err)
	}
	for i, c := range prog {
		for r := 1; r < n; r++ {
			if !slices.Equal(outs[r][i], outs[0][i]) {
				t.Fatalf("call %d (%v): rank %d's result differs from rank 0's", i, c, r)
			}
		}
		if err := checkHierResult(c, n, uint64(i), outs[0][i]); err != nil {
			t.Fatalf("call %d (%v): %v", i, c, err)
		}
	}
}

func hierAllReduce(ctx context.Context, g *allreduce.Group, c hierCall, seed uint64) ([]byte, error) {
	switch c.dtype {
	case allreduce.Float32:
		return hierAllReduceOf[float32](ctx, g, c, seed)
	case allreduce.Float64:
		return hierAllReduceOf[float64](ctx, g, c, seed)
	case allreduce.Int32:
		return hierAllReduceOf[int32](ctx, g, c, seed)
	}
	return hierAllReduceOf[int64](ctx, g, c, seed)
}

func hierAllReduceOf[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c hierCall, seed uint64) ([]byte, error) {
	buf := allreducetest.Input[T](seed, g.Rank(), c.length, c.op)
	err := allreduce.AllReduce(ctx, g, buf, c.op)
	return slices.Clone(rawBytes(buf)), err
}

func checkHierResult(c hierCall, n int, seed uint64, got []byte) error {
	switch c.dtype {
	case allreduce.Float32:
		return checkHierResultOf[float32](c, n, seed, got)
	case allreduce.Float64:
		return checkHierResultOf[float64](c, n, seed, got)
	case allreduce.Int32:
		return checkHierResultOf[int32](c, n, seed, got)
	}
	return checkHierResultOf[int64](c, n, seed, got)
}

func checkHierResultOf[T allreduce.Numeric](c hierCall, n int, seed uint64, got []byte) error {
	inputs := make([][]T, n)
	for r := range inputs {
		inputs[r] = allreducetest.Input[T](seed, r, c.length, c.op)
	}
	want := allreducetest.Reduce(inputs, c.op)
	return diffBits("result", hierElems[T](got), want)
}

func hierElems[T allreduce.Numeric](b []byte) []T {
	out := make([]T, len(b)/len(rawBytes(make([]T, 1))))
	copy(rawBytes(out), b)
	return out
}

// TestHierTorusMeshSpecialValues: random programs of collectives on
// special values (±0, NaN payloads, ±Inf, denormals) with every local
// size, uneven nodes included: bitwise identical on every rank, equal to
// the reference, and the same bits run to run.
func TestHierTorusMeshSpecialValues(t *testing.T) {
	perCase := 120
	if testing.Short() {
		perCase = 40
	}
	for _, algo := range topologyAlgorithms {
		for _, k := range hierLocalSizes {
			t.Run(fmt.Sprintf("%v/local=%d", algo, k), func(t *testing.T) {
				t.Parallel()
				done := 0
				for p := 0; done < perCase; p++ {
					n := []int{3, 5, 7, 10}[p%4]
					seed := uint64(p)*0x9e3779b97f4a7c15 + uint64(algo)<<8 + uint64(k)
					prog := allreducetest.RandomProgram(seed, n, 20, 5000)
					var runs [2][]allreducetest.Outcome
					for i := range runs {
						var err error
						runs[i], err = allreducetest.RunProgram(topoConns(t, n, k), prog, time.Minute, allreduce.WithAlgorithm(algo))
						if err != nil {
							t.Fatalf("program %d on %d ranks: %v", p, n, err)
						}
					}
					if err := allreducetest.CheckProgram(prog, runs[0]); err != nil {
						t.Fatalf("program %d on %d ranks: %v", p, n, err)
					}
					if err := allreducetest.SameOutcomes(runs[0], runs[1]); err != nil {
						t.Fatalf("program %d on %d ranks: %v", p, n, err)
					}
					done += len(prog)
				}
			})
		}
	}
}

// TestHierTorusMeshNeedTopology: asked for on ranks that do not know their
// node, each algorithm is an error from NewGroup on every rank, before any
// communication, and Auto and the test helpers leave it out.
func TestHierTorusMeshNeedTopology(t *testing.T) {
	for _, algo := range topologyAlgorithms {
		w, err := inproc.NewWorld(3)
		if err != nil {
			t.Fatal(err)
		}
		for r := range 3 {
			g, err := allreduce.NewGroup(w.Conn(r), allreduce.WithAlgorithm(algo))
			if err == nil {
				g.Close()
				t.Fatalf("%v: rank %d: NewGroup succeeded without a topology", algo, r)
			}
			if !errors.Is(err, allreduce.ErrInvalid) || !strings.Contains(err.Error(), algo.String()) || !strings.Contains(err.Error(), "node") {
				t.Errorf("%v: rank %d: unclear error: %v", algo, r, err)
			}
		}
		if slices.Contains(allreducetest.AlgorithmsFor(w.Conn(0)), algo) {
			t.Errorf("%v listed for a world without topology", algo)
		}
		if !slices.Contains(allreducetest.AlgorithmsFor(topoConns(t, 1, 1)[0]), algo) {
			t.Errorf("%v not listed for a world with topology", algo)
		}
		got, err := allreduce.ParseAlgorithm(algo.String())
		if err != nil || got != algo {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", algo.String(), got, err)
		}
		_ = w.Close()
	}
}

// TestHierTorusMeshNodesByName: nodes named per rank (allreduce.WithNode),
// not consecutive and of sizes 4, 1, 3 and 2 in an odd order, with other
// calls on the group and on a split group before and after; and the
// Topology the algorithms learnt is the group's.
func TestHierTorusMeshNodesByName(t *testing.T) {
	// rank → node: nodes are numbered by lowest rank: a=0, b=1, c=2, d=3.
	nodeOf := []string{"a", "b", "c", "a", "d", "c", "a", "d", "c", "a"}
	n := len(nodeOf)
	for _, algo := range topologyAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			w, err := inproc.NewWorld(n, inproc.WithTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			groups := make([]*allreduce.Group, n)
			for r := range groups {
				if groups[r], err = allreduce.NewGroup(w.Conn(r), allreduce.WithAlgorithm(algo), allreduce.WithNode(nodeOf[r])); err != nil {
					t.Fatal(err)
				}
			}
			defer func() {
				for _, g := range groups {
					g.Close()
				}
			}()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for r, g := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = nodesByNameRank(g, nodeOf)
				}()
			}
			wg.Wait()
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func nodesByNameRank(g *allreduce.Group, nodeOf []string) error {
	ctx, cancel := allreducetest.Ctx(time.Minute)
	defer cancel()
	n, r := g.Size(), g.Rank()
	ref := func(length int, op allreduce.ReduceOp, ranks []int) []float64 {
		inputs := make([][]float64, len(ranks))
		for i, q := range ranks {
			inputs[i] = allreducetest.Input[float64](uint64(length), q, length, op)
		}
		return allreducetest.Reduce(inputs, op)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	check := func(what string, g *allreduce.Group, length int, op allreduce.ReduceOp, me int, ranks []int) error {
		buf := allreducetest.Input[float64](uint64(length), me, length, op)
		if err := allreduce.AllReduce(ctx, g, buf, op); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return diffBits(what, buf, ref(length, op, ranks))
	}
	if err := allreduce.Barrier(ctx, g); err != nil {
		return err
	}
	for _, length := range []int{1, n + 1, 1000, 70000} {
		for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max} {
			if err := check(fmt.Sprintf("%d elements, %v", length, op), g, length, op, r, all); err != nil {
				return err
			}
		}
	}
	topo, err := g.Topology(ctx)
	if err != nil {
		return err
	}
	if got := topo.String(); got != "4 nodes: 4,1,3,2" {
		return fmt.Errorf("topology %s, want 4 nodes: 4,1,3,2", got)
	}
	// A split group (the ranks of even rank) runs the algorithm on its own
	// members' nodes, interleaved with calls on the parent.
	sub, err := g.Split(ctx, r%2, r)
	if err != nil {
		return err
	}
	var mine []int
	for q := r % 2; q < n; q += 2 {
		mine = append(mine, q)
	}
	for i := range 3 {
		if err := check("split group", sub, 100+i, allreduce.Sum, r, mine); err != nil {
			return err
		}
		if err := check("parent after split", g, 50+i, allreduce.Min, r, all); err != nil {
			return err
		}
	}
	st, err := sub.Topology(ctx)
	if err != nil {
		return err
	}
	if st.Size() != len(mine) {
		return fmt.Errorf("split topology of %d ranks, want %d", st.Size(), len(mine))
	}
	return sub.Close()
}

// TestHierTorusMeshAsync: asynchronous AllReduces of every topology-aware
// algorithm, issued back to back, complete in order with the right results.
func TestHierTorusMeshAsync(t *testing.T) {
	for _, algo := range topologyAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			const n, k, calls = 7, 3, 6
			errs := allreducetest.RunRanks(topoConns(t, n, k), func(g *allreduce.Group) error {
				ctx, cancel := allreducetest.Ctx(time.Minute)
				defer cancel()
				bufs := make([][]int64, calls)
				works := make([]*allreduce.Work, calls)
				for i := range calls {
					bufs[i] = allreducetest.Input[int64](uint64(i), g.Rank(), 10+i*97, allreduce.Sum)
					works[i] = allreduce.AllReduceAsync(ctx, g, bufs[i], allreduce.Sum)
				}
				for i, w := range works {
					if err := w.Wait(ctx); err != nil {
						return err
					}
					inputs := make([][]int64, n)
					for q := range inputs {
						inputs[q] = allreducetest.Input[int64](uint64(i), q, 10+i*97, allreduce.Sum)
					}
					if err := diffBits(fmt.Sprintf("call %d", i), bufs[i], allreducetest.Reduce(inputs, allreduce.Sum)); err != nil {
						return err
					}
				}
				return nil
			}, allreduce.WithAlgorithm(algo))
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
		})
	}
}
