package allreduce_test

import (
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
	"github.com/ringddp/ringddp/internal/run/reference"
)

// The topology-aware algorithms (Hierarchical, Torus, Mesh) on in-process
// ranks with a simulated topology (inproc.WithLocalSize: nodes of k
// consecutive ranks, the last smaller when k does not divide N), against
// the sequential reference. Test names match 'Hier|Torus|Mesh'.

var topologyAlgorithms = []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}

var hierLocalSizes = []int{1, 2, 3, 4}

// topoConns is an in-process world of n ranks on nodes of localSize
// consecutive ranks.
func topoConns(t testing.TB, n, localSize int) []transport.Conn {
	t.Helper()
	return allreducetest.Inproc(30*time.Second, inproc.WithLocalSize(localSize))(t, n)
}

// hierHuge are the huge cells (2^20+3 elements) of the topology-aware
// algorithms, where the sub-groups' all-reduces take the ring and Reduce
// and Broadcast the pipelined chains. TestMatrix adds each algorithm on 5
// ranks of nodes of 3, Sum float32.
var hierHuge = []struct {
	algo allreduce.Algorithm
	n, k int // ranks, local size
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

// hierHugeCell is hierHuge's op and dtype for algo on n ranks of nodes of
// k, if any; in short mode only Torus's on 7 ranks.
func hierHugeCell(algo allreduce.Algorithm, n, k int) ([]allreduce.ReduceOp, []allreduce.DType) {
	for i, h := range hierHuge {
		if h.algo == algo && h.n == n && h.k == k && (i == 2 || !testing.Short()) {
			return []allreduce.ReduceOp{h.op}, []allreduce.DType{h.dt}
		}
	}
	return nil, nil
}

// TestHierTorusMeshMatrix is the AllReduce matrix of every topology-aware
// algorithm on worlds of every local size k in {1, 2, 3, 4} (nodes of k
// consecutive ranks, the last smaller wherever k does not divide N; k > N,
// the same one-node world as k = N, left out): ranks 1..17 and 32, lengths
// {0, 1, N-1, N, N+1, 1000}, every op and dtype up to 8 ranks and three
// per length above, and the huge cells of hierHuge, synchronously.
// TestMatrix runs nodes of 3 on allreducetest.DefaultRanks with every op
// and dtype (and async and repeated calls): those are left to it, but for
// their huge cells.
//
// Above 8 ranks Matrix takes the ops and dtypes of the lengths from a
// rotation (MatrixConfig.ThinCells): cell j is op j mod 5 with dtype j
// mod 4, so any 20 cells in a row are every pair, two of them Avg on an
// integer type (checked to be an error). Three cells per length are at
// least two that reduce, and each local size starts the rotation 18 cells
// further on (Ops and DTypes both rotated by as much), so that the four
// local sizes' 6 lengths × 3 cells together run cells 0..71: every op ×
// dtype on every rank count of every algorithm, three times or more.
func TestHierTorusMeshMatrix(t *testing.T) {
	for i, k := range hierLocalSizes {
		t.Run(fmt.Sprintf("local=%d", k), func(t *testing.T) {
			t.Parallel()
			inTestMatrix := func(n int) bool {
				return k == testMatrixLocalSize && slices.Contains(allreducetest.DefaultRanks, n)
			}
			var ranks []int
			for _, n := range algoRanks {
				huge := slices.ContainsFunc(topologyAlgorithms, func(a allreduce.Algorithm) bool {
					ops, _ := hierHugeCell(a, n, k)
					return len(ops) > 0
				})
				if (k <= n || k == 1) && (!inTestMatrix(n) || huge) {
					ranks = append(ranks, n)
				}
			}
			allreducetest.Matrix(t, allreducetest.MatrixConfig{
				Connect:     allreducetest.Inproc(30*time.Second, inproc.WithLocalSize(k)),
				Collectives: []allreduce.Kind{allreduce.KindAllReduce},
				Algorithms:  topologyAlgorithms,
				Ranks:       ranks,
				Lengths: func(n int) []int {
					if inTestMatrix(n) {
						return nil // its huge cells only
					}
					return allreducetest.MatrixLengths(n)
				},
				Ops:       rotated(allreducetest.AllOps, 18*i),
				DTypes:    rotated(allreducetest.AllDTypes, 18*i),
				FullRanks: 8,
				ThinCells: 3,
				SyncOnly:  true,
				Huge: func(_ allreduce.Kind, algo allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
					return hierHugeCell(algo, n, k)
				},
			})
		})
	}
}

// rotated is s from element i mod len(s) on, then the elements before it.
func rotated[E any](s []E, i int) []E {
	i %= len(s)
	return append(slices.Clone(s[i:]), s[:i]...)
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
			refs := &refCache{m: map[string][]float64{}}
			for r, g := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = nodesByNameRank(g, nodeOf, refs)
				}()
			}
			wg.Wait()
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refCache is the sequential references of one world's checks, made by
// the first rank that needs each and read by the others (made by each of
// ten ranks, they were most of the test's time).
type refCache struct {
	mu sync.Mutex
	m  map[string][]float64
}

// ref is the reduction by op of ranks' inputs of length (read-only).
func (c *refCache) ref(length int, op allreduce.ReduceOp, ranks []int) []float64 {
	key := fmt.Sprint(length, op, ranks)
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, ok := c.m[key]; ok {
		return out
	}
	inputs := make([][]float64, len(ranks))
	for i, q := range ranks {
		inputs[i] = reference.Input[float64](uint64(length), q, length, op)
	}
	c.m[key] = reference.Reduce(inputs, op)
	return c.m[key]
}

func nodesByNameRank(g *allreduce.Group, nodeOf []string, refs *refCache) error {
	ctx, cancel := allreducetest.Ctx(time.Minute)
	defer cancel()
	n, r := g.Size(), g.Rank()
	ref := refs.ref
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	check := func(what string, g *allreduce.Group, length int, op allreduce.ReduceOp, me int, ranks []int) error {
		buf := reference.Input[float64](uint64(length), me, length, op)
		if err := allreduce.AllReduce(ctx, g, buf, op); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return allreducetest.DiffBits(what, buf, ref(length, op, ranks))
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
					bufs[i] = reference.Input[int64](uint64(i), g.Rank(), 10+i*97, allreduce.Sum)
					works[i] = allreduce.AllReduceAsync(ctx, g, bufs[i], allreduce.Sum)
				}
				for i, w := range works {
					if err := w.Wait(ctx); err != nil {
						return err
					}
					inputs := make([][]int64, n)
					for q := range inputs {
						inputs[q] = reference.Input[int64](uint64(i), q, 10+i*97, allreduce.Sum)
					}
					if err := allreducetest.DiffBits(fmt.Sprintf("call %d", i), bufs[i], reference.Reduce(inputs, allreduce.Sum)); err != nil {
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
