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

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
)

// splitMembers is the reference for Split: the ranks of each color, ordered
// by (key, rank).
func splitMembers(colors, keys []int, color int) []int {
	var m []int
	for r, c := range colors {
		if c == color {
			m = append(m, r)
		}
	}
	slices.SortStableFunc(m, func(a, b int) int {
		if keys[a] != keys[b] {
			return keys[a] - keys[b]
		}
		return a - b
	})
	return m
}

// Split into several colours with keys that reorder ranks; every
// sub-group all-reduces (ring, doubling, auto), all-gathers and
// broadcasts against the sequential reference over its members, the
// siblings at the same time; then the parent still works, and a second
// Split of a sub-group too.
func TestSplitCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 13} {
		for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring, allreduce.Doubling} {
			t.Run(fmt.Sprintf("ranks=%d/%v", n, algo), func(t *testing.T) {
				colors := make([]int, n)
				keys := make([]int, n)
				for r := range n {
					colors[r] = r % 3
					keys[r] = (n - r) * 7 % 5 // ties on purpose
				}
				if n > 4 {
					colors[n-1] = -1 // no group
				}
				errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
					ctx, cancel := allreducetest.Ctx(30 * time.Second)
					defer cancel()
					r := g.Rank()
					sub, err := g.Split(ctx, colors[r], keys[r])
					if err != nil {
						return err
					}
					if colors[r] < 0 {
						if sub != nil {
							return errors.New("negative color gave a group")
						}
						return allreduce.AllReduce(ctx, g, []int32{1}, allreduce.Sum)
					}
					members := splitMembers(colors, keys, colors[r])
					if sub.Size() != len(members) || members[sub.Rank()] != r {
						return fmt.Errorf("rank %d: sub-rank %d of %d, want position in %v", r, sub.Rank(), sub.Size(), members)
					}
					if err := checkSubCollectives(ctx, sub, r, members); err != nil {
						return err
					}
					// A split of the split.
					subsub, err := sub.Split(ctx, sub.Rank()%2, -sub.Rank())
					if err != nil {
						return err
					}
					x := []int64{int64(r)}
					if err := allreduce.AllReduce(ctx, subsub, x, allreduce.Sum); err != nil {
						return err
					}
					var want int64
					for i, m := range members {
						if i%2 == sub.Rank()%2 {
							want += int64(m)
						}
					}
					if x[0] != want {
						return fmt.Errorf("rank %d: split of a split summed %d, want %d", r, x[0], want)
					}
					if err := subsub.Close(); err != nil {
						return err
					}
					if err := sub.Close(); err != nil {
						return err
					}
					// The parent still works after its sub-groups closed.
					y := []int32{1}
					if err := allreduce.AllReduce(ctx, g, y, allreduce.Sum); err != nil {
						return err
					}
					if y[0] != int32(n) {
						return fmt.Errorf("parent all-reduce %d, want %d", y[0], n)
					}
					if err := allreduce.AllReduce(ctx, sub, y, allreduce.Sum); !errors.Is(err, transport.ErrClosed) {
						return fmt.Errorf("call on a closed sub-group: %v", err)
					}
					return nil
				}, allreduce.WithAlgorithm(algo))
				require.NoError(t, allreducetest.FirstError(errs))
			})
		}
	}
}

// checkSubCollectives all-reduces, all-gathers and broadcasts on sub (rank
// r of the parent; members are its parent ranks, by sub-rank) at several
// lengths against the sequential reference over its members.
func checkSubCollectives(ctx context.Context, sub *allreduce.Group, r int, members []int) error {
	for _, length := range []int{0, 1, 7, 1000, 40000} {
		inputs := make([][]float64, len(members))
		for i, m := range members {
			inputs[i] = reference.Input[float64](uint64(length), m, length, allreduce.Sum)
		}
		buf := append([]float64(nil), inputs[sub.Rank()]...)
		if err := allreduce.AllReduce(ctx, sub, buf, allreduce.Sum); err != nil {
			return err
		}
		if want := reference.Reduce(inputs, allreduce.Sum); !slices.Equal(buf, want) {
			return fmt.Errorf("rank %d: sub-group all-reduce of %d elements differs from the reference", r, length)
		}
		gathered := make([]float64, length)
		lo, hi := allreduce.ChunkBounds(length, sub.Size(), sub.Rank())
		if err := allreduce.AllGather(ctx, sub, gathered, inputs[sub.Rank()][lo:hi]); err != nil {
			return err
		}
		for i := range sub.Size() {
			a, b := allreduce.ChunkBounds(length, sub.Size(), i)
			if !slices.Equal(gathered[a:b], inputs[i][a:b]) {
				return fmt.Errorf("rank %d: all-gather chunk %d wrong", r, i)
			}
		}
		bc := append([]float64(nil), inputs[sub.Rank()]...)
		if err := allreduce.Broadcast(ctx, sub, bc, sub.Size()-1); err != nil {
			return err
		}
		if !slices.Equal(bc, inputs[sub.Size()-1]) {
			return fmt.Errorf("rank %d: broadcast wrong", r)
		}
	}
	return nil
}

// Calls on a parent and its sub-group, issued from several goroutines and
// asynchronously, run in issue order on each rank: no message of one group
// is taken for the other's.
func TestSplitInterleavedWithParent(t *testing.T) {
	const n = 6
	errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
		ctx, cancel := allreducetest.Ctx(30 * time.Second)
		defer cancel()
		sub, err := g.Split(ctx, g.Rank()%2, 0)
		if err != nil {
			return err
		}
		var works []*allreduce.Work
		bufs := make([][]float32, 40)
		for i := range bufs {
			bufs[i] = []float32{float32(g.Rank()), 1, 2}
			if i%2 == 0 {
				works = append(works, allreduce.AllReduceAsync(ctx, g, bufs[i], allreduce.Sum))
			} else {
				works = append(works, allreduce.AllReduceAsync(ctx, sub, bufs[i], allreduce.Sum))
			}
		}
		if err := allreduce.WaitAll(ctx, works...); err != nil {
			return err
		}
		for i, b := range bufs {
			want := float32(n * (n - 1) / 2)
			if i%2 == 1 {
				want = 0
				for q := g.Rank() % 2; q < n; q += 2 {
					want += float32(q)
				}
			}
			if b[0] != want {
				return fmt.Errorf("rank %d call %d: %v, want %v", g.Rank(), i, b[0], want)
			}
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
}

// A mismatch inside a sub-group is named, with world ranks and the
// sub-group's calls; the failure poisons the parent too.
func TestSplitMismatchNamed(t *testing.T) {
	const n = 5
	errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
		ctx, cancel := allreducetest.Ctx(30 * time.Second)
		defer cancel()
		sub, err := g.Split(ctx, g.Rank()%2, 0) // {0, 2, 4} and {1, 3}
		if err != nil {
			return err
		}
		count := 8
		if g.Rank() == 4 {
			count = 9
		}
		err = allreduce.AllReduce(ctx, sub, make([]float32, count), allreduce.Sum)
		if g.Rank()%2 == 1 {
			if err != nil {
				return fmt.Errorf("the other sub-group failed: %w", err)
			}
			err = allreduce.Barrier(ctx, g) // learns of the failure here
		}
		if err == nil {
			return errors.New("no error")
		}
		return err
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.ErrorIs(t, err, transport.ErrMismatch, "rank %d: %v", r, err)
		if r%2 == 0 {
			require.Contains(t, err.Error(), "AllReduce(float32 × 9, Sum) on group", "rank %d", r)
			require.Contains(t, err.Error(), "AllReduce(float32 × 8, Sum) on group", "rank %d", r)
		}
		if r == 4 {
			require.True(t, strings.HasPrefix(err.Error(), "allreduce: rank 4 called #0 AllReduce(float32 × 9, Sum) on group"), err.Error())
		}
	}
}

// Topology: a simulated 7-rank world of nodes of 3 is 3, 3, 1; a world
// without a topology is a clear error before any communication.
func TestTopology(t *testing.T) {
	w, err := inproc.NewWorld(7, inproc.WithLocalSize(3), inproc.WithTimeout(10*time.Second))
	require.NoError(t, err)
	conns := make([]transport.Conn, 7)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	var mu sync.Mutex
	topos := make([]allreduce.Topology, 7)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		topo, err := g.Topology(context.Background())
		mu.Lock()
		topos[g.Rank()] = topo
		mu.Unlock()
		return err
	})
	require.NoError(t, allreducetest.FirstError(errs))
	for r, topo := range topos {
		require.Equal(t, "3 nodes: 3,3,1", topo.String(), "rank %d", r)
		require.Equal(t, r/3, topo.Node(r))
		require.Equal(t, r%3, topo.LocalRank(r))
		require.Equal(t, min(3, 7-r/3*3), topo.LocalSize(r))
	}

	errs = allreducetest.RunInproc(2, 10*time.Second, func(g *allreduce.Group) error {
		_, err := g.Topology(context.Background())
		return err
	})
	for r, err := range errs {
		require.ErrorIs(t, err, allreduce.ErrInvalid, "rank %d", r)
		require.Contains(t, err.Error(), "does not know its node")
	}
}
