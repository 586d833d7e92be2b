package zero

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The offset rule: the ranks per node when they fill two nodes or more,
// else the ring neighbour.
func TestBuddyOffset(t *testing.T) {
	for _, c := range []struct{ world, local, want int }{
		{8, 4, 4}, {6, 2, 2}, {6, 3, 3}, {4, 2, 2}, {2, 1, 1}, {5, 1, 1},
		{4, 4, 1}, // one host
		{5, 2, 1}, // nodes of unequal sizes (a rank lost)
		{3, 4, 1}, // fewer ranks than a node holds
		{4, 0, 1}, // unknown
	} {
		require.Equal(t, c.want, BuddyOffset(c.world, c.local), "BuddyOffset(%d, %d)", c.world, c.local)
	}
	require.NoError(t, checkOffset(6, 2))
	for _, d := range []int{0, -1, 6, 7} {
		require.ErrorContains(t, checkOffset(6, d), "must be another rank")
	}
}

// A generation's offset from its ranks' nodes: nodes of equal size →
// their size; nodes of unequal sizes → the fullest node's ranks m when
// m ≤ N/2, else N−m; one node → 1.
func TestNodesOffset(t *testing.T) {
	for _, c := range []struct {
		nodes []int
		want  int
	}{
		{[]int{0, 0, 0, 0, 1, 1, 1, 1}, 4},
		{[]int{0, 0, 0, 0}, 1},          // one node left
		{[]int{0, 0, 2, 2, 3, 3}, 2},    // node 1 of 4 lost
		{[]int{0, 0, 0, 1, 1, 1}, 3},    // one rank of each node lost: 2 nodes of 3
		{[]int{0, 0, 0, 0, 1, 1, 1}, 3}, // nodes of 4 and 3: N−m
		{[]int{0, 0, 1, 1, 2}, 2},       // nodes of 2, 2 and 1: m
		{[]int{0, 1, 1, 2, 2}, 2},       // nodes of 1, 2 and 2
		{[]int{0, 1, 1, 1, 1}, 1},       // nodes of 1 and 4: N−m
		{[]int{0, 0, 1, 2, 2, 1}, 2},    // a joiner of node 1 appended last
		{[]int{0, 0}, 1},
		{[]int{3}, 1},
	} {
		require.Equal(t, c.want, NodesOffset(c.nodes), "nodes %v", c.nodes)
	}
}

// NodesOffset puts the fewest buddies on their own rank's node that any
// cyclic shift can, and no more than max(0, 2m−N) (m: the fullest node's
// ranks), for every way of keeping ranks of up to 5 nodes of up to 4
// ranks each in start order: counted here by trying every offset.
func TestNodesOffsetFewestOnOwnNode(t *testing.T) {
	const local, nodes = 4, 5
	world := local * nodes
	sameNode := func(of []int, d int) int {
		n, same := len(of), 0
		for p, k := range of {
			if k == of[(p+d)%n] {
				same++
			}
		}
		return same
	}
	for keep := 1; keep < 1<<world; keep += 997 { // a deterministic sample of the subsets
		var of []int
		per := map[int]int{}
		for r := range world {
			if keep&(1<<r) != 0 {
				of = append(of, r/local)
				per[r/local]++
			}
		}
		n := len(of)
		if n < 2 || len(per) < 2 {
			continue
		}
		fullest := 0
		for _, c := range per {
			fullest = max(fullest, c)
		}
		d := NodesOffset(of)
		require.NoError(t, checkOffset(n, d), "nodes %v", of)
		best := n
		for e := 1; e < n; e++ {
			best = min(best, sameNode(of, e))
		}
		got := sameNode(of, d)
		require.Equal(t, best, got, "nodes %v: offset %d puts %d buddies on their rank's node, offset search finds %d", of, d, got, best)
		require.Equal(t, max(0, 2*fullest-n), got, "nodes %v, offset %d", of, d)
	}
}

// NodesOffset on ranks of up to 4 nodes in any order (not only each
// node's ranks together, as after joiners): no cyclic shift puts fewer
// buddies on their rank's node, and of those it is the smallest where its
// fast offsets (m, N−m) do not reach the floor; ranks on one node: 1.
func TestNodesOffsetAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 7))
	sameNode := func(nodes []int, d int) int {
		same := 0
		for i, k := range nodes {
			if nodes[(i+d)%len(nodes)] == k {
				same++
			}
		}
		return same
	}
	require.Equal(t, 1, NodesOffset([]int{3, 3, 3}))
	require.Equal(t, 1, NodesOffset([]int{5}))
	require.Equal(t, 1, NodesOffset(nil))
	for range 3000 {
		n := 2 + rng.IntN(11)
		nodes := make([]int, n)
		for i := range nodes {
			nodes[i] = rng.IntN(4)
		}
		d := NodesOffset(nodes)
		if slices.Min(nodes) == slices.Max(nodes) {
			require.Equal(t, 1, d, "nodes %v", nodes)
			continue
		}
		require.NoError(t, checkOffset(n, d), "nodes %v", nodes)
		best := n
		for e := 1; e < n; e++ {
			best = min(best, sameNode(nodes, e))
		}
		require.Equal(t, best, sameNode(nodes, d), "nodes %v: offset %d", nodes, d)
	}
}

// Every edge r → r+d of every world and offset has a round below
// buddyRounds, and no rank is in two edges of one round (the split's pair
// groups of a round are disjoint).
func TestEdgeRoundsDisjoint(t *testing.T) {
	for n := 2; n <= 12; n++ {
		for d := 1; d < n; d++ {
			rounds := buddyRounds(n, d)
			busy := map[[2]int]int{} // (round, rank) → edge
			for e := range n {
				c := edgeRound(e, n, d)
				require.True(t, c >= 0 && c < rounds, "n=%d d=%d: edge %d in round %d of %d", n, d, e, c, rounds)
				for _, r := range []int{e, (e + d) % n} {
					if prev, ok := busy[[2]int{c, r}]; ok && prev != e {
						t.Fatalf("n=%d d=%d: rank %d in edges %d and %d of round %d", n, d, r, prev, e, c)
					}
					busy[[2]int{c, r}] = e
				}
			}
		}
	}
}

// The lost-pair judgement: a rank and its buddy (r+d) both lost, and
// nothing else, is fatal; bad ranks are named.
func TestShardsKept(t *testing.T) {
	for _, c := range []struct {
		n, d int
		lost []int
		want string
	}{
		{8, 4, []int{4, 5, 6, 7}, ""}, // a whole node of 4
		{8, 4, []int{0, 1, 2, 3}, ""},
		{8, 4, []int{1, 5}, "rank 1's optimizer shard is gone: its buddy, rank 5,"},
		{8, 4, []int{6, 2}, "rank 2's optimizer shard is gone: its buddy, rank 6,"},
		{8, 1, []int{4, 5}, "rank 4's optimizer shard is gone: its buddy, rank 5,"},
		{6, 2, []int{2, 3}, ""},
		{6, 2, []int{0, 4}, "rank 4's optimizer shard is gone: its buddy, rank 0,"},
		{4, 1, []int{0, 2}, ""},
		{4, 1, []int{4}, "lost rank 4 is not a rank of the world of 4"},
	} {
		t.Run(fmt.Sprintf("n=%d/d=%d/lost=%v", c.n, c.d, c.lost), func(t *testing.T) {
			err := ShardsKept(c.n, c.d, c.lost)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}

// Re-shards with buddies on the next node: a whole node lost, the old
// world's copies at offset d, the new one's at its own offset; every
// shard and copy rebuilt bitwise, and only what the ranks lacked sent.
func TestReshardNodeLost(t *testing.T) {
	buckets, total := layout(reshardLayouts["odd"])
	for i, c := range []struct {
		n, local int
		old      []int
	}{
		{6, 2, []int{0, 1, 4, 5}},         // node 1 of 3 lost: offset 2 → 2
		{6, 2, []int{0, 1, 2, 3}},         // the last node: its copies on node 0
		{8, 4, []int{0, 1, 2, 3}},         // 2 nodes of 4 → one host: offset 4 → 1
		{4, 2, []int{0, 1, 2, 3, -1, -1}}, // a node joins: 2 → 2
	} {
		d, newD := BuddyOffset(c.n, c.local), BuddyOffset(len(c.old), c.local)
		tr := Transition{OldSize: c.n, Old: c.old, Offset: d} // a joiner has no old wrapper to tell it d
		t.Run(fmt.Sprintf("%d→%v/d=%d→%d", c.n, c.old, d, newD), func(t *testing.T) {
			checkRegroup(t, buckets, total, tr, uint64(40+i), d, newD)
		})
	}
}
