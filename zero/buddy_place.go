package zero

import (
	"context"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Buddy placement: which rank holds the copy of which shard (issue #34).
//
// Vocabulary (N ranks):
//   - offset d: rank r's buddy is rank (r+d) mod N, and rank r holds the
//     copy of its left, rank (r-d) mod N. Every rank of a world uses the
//     same d, so that every rank is the buddy of exactly one other.
//   - node: the ranks one launcher starts, local (LOCAL_WORLD_SIZE) of
//     them, numbered consecutively (node k holds ranks kL .. kL+L-1).
//
// With d = 1 a rank's buddy is its ring neighbour, on its own node when
// nodes hold several ranks: a node's loss takes a shard and its only copy.
// BuddyOffset places the copy on the next node instead (the cross-node
// replication of torchft's and Gemini's): with N = kL ranks on k ≥ 2
// nodes of L each, d = L, and rank r's buddy, r+L mod N, is the rank of
// the same local rank on the next node. Losing a whole node then loses no
// copy together with its shard, as long as the next node stays.
//
// Exchange rounds (buddy.go's split): the edges r → r+d form gcd(N, d)
// cycles of N/gcd(N, d) ranks each; edgeRound colours each cycle as the
// ring was coloured with d = 1 (alternately 0 and 1 along the cycle, 2 for
// the last edge of an odd cycle), so that no rank is in two edges of one
// round.

// BuddyOffset is the buddy offset of a world of world ranks on nodes of
// local ranks each: local when the ranks fill at least two whole nodes of
// local ranks (world a multiple of local, above it), else 1 (one host, or
// nodes of unequal sizes: the ring neighbour).
func BuddyOffset(world, local int) int {
	if local >= 1 && world > local && world%local == 0 {
		return local
	}
	return 1
}

// WrapWithBuddy is WrapWithBuddyAt with offset 1: every rank's buddy is
// its ring neighbour.
func WrapWithBuddy[T ddp.Float](ctx context.Context, group *allreduce.Group, params G.Nodes, opt, shadow optim.Optimizer[T], opts ...ddp.Option) (*ZeRO1[T], error) {
	return WrapWithBuddyAt(ctx, group, params, opt, shadow, 1, opts...)
}

// NodesOffset is the buddy offset of a generation whose rank i runs on
// node nodes[i]: an offset d that puts the fewest buddies on their own
// rank's node (rank i's buddy, i+d mod N, on node nodes[i]); 1 with fewer
// than 2 ranks or all on one node.
// With m ranks on the fullest node no offset does better than max(0,
// 2m−N) (that node's m shards need m holders, and the other nodes have
// N−m ranks), and where every node's ranks are consecutive (as a cyclic
// interval: a generation in start order, joiners appended) two offsets
// reach it, tried first:
//   - m when m ≤ N/2: rank p of a node whose ranks are p0 .. p0+s-1 (s ≤
//     m) has its buddy at p+m, past the node's last rank, and wrapping
//     round lands back on the node only if s + m > N;
//   - N−m: the fullest node's ranks past its first 2m−N have their buddies
//     off it, and every other node's s ≤ N−m ranks theirs elsewhere, by
//     the same argument.
//
// The first of m (when m ≤ N/2) and N−m that reaches that floor is the
// offset; with equally many ranks on every node, m = N/k: BuddyOffset's
// rule. Where neither does, every offset is counted (N² steps at most)
// and the smallest with the fewest taken. A launcher and the ranks
// compute the same offset from the same nodes.
func NodesOffset(nodes []int) int {
	n := len(nodes)
	per := map[int]int{}
	for _, k := range nodes {
		per[k]++
	}
	if n < 2 || len(per) < 2 {
		return 1
	}
	fullest := 0
	for _, c := range per {
		fullest = max(fullest, c)
	}
	floor := max(0, 2*fullest-n)
	best, fewest := 0, n+1
	try := func(d int) bool {
		if d < 1 || d >= n {
			return false
		}
		same := 0
		for i, k := range nodes {
			if nodes[(i+d)%n] == k {
				same++
			}
		}
		if same < fewest || same == fewest && d < best {
			best, fewest = d, same
		}
		return fewest == floor
	}
	if 2*fullest <= n && try(fullest) || try(n-fullest) {
		return best
	}
	for d := 1; d < n; d++ {
		if try(d) {
			break
		}
	}
	return best
}

// checkOffset reports whether d is a buddy offset for n ranks: a rank's
// buddy must be another rank.
func checkOffset(n, d int) error {
	if d < 1 || d >= n {
		return fmt.Errorf("zero: buddy offset %d in a world of %d ranks: rank r's buddy, (r+%d) mod %d, must be another rank (want an offset in [1, %d))", d, n, d, n, n)
	}
	return nil
}

// gcd is the greatest common divisor of a, b ≥ 1.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// buddyRounds is how many exchange rounds the edges r → r+d of n ranks
// need: 2 when their cycles are even, 3 when odd.
func buddyRounds(n, d int) int {
	if (n/gcd(n, d))%2 == 1 {
		return 3
	}
	return 2
}

// edgeRound is the round in which edge e (rank e → rank e+d mod n) is
// sent: e's position k along its cycle (e = e mod g + k·d mod n), taken
// mod 2, and 2 for the last edge of an odd cycle.
func edgeRound(e, n, d int) int {
	g := gcd(n, d)
	c := n / g
	k := 0
	for at := e % g; at != e; at = (at + d) % n {
		k++
	}
	if c%2 == 1 && k == c-1 {
		return 2
	}
	return k % 2
}

// lostPair is the first old rank whose shard is gone when the ranks with
// lost set are lost from a world of n ranks with buddy offset d: lost, and
// its buddy, which held the only copy, lost too. ok is false when every
// shard has a holder left.
func lostPair(lost []bool, d int) (rank, buddy int, ok bool) {
	n := len(lost)
	for r := range n {
		if b := (r + d) % n; b != r && lost[r] && lost[b] {
			return r, b, true
		}
	}
	return 0, 0, false
}

// LostBuddyPair is the first rank of a world of n ranks with buddy offset
// d whose shard is gone after losing the ranks lost (ranks of that world;
// others are ignored): lost, with its buddy, which held the only copy.
// gone is false when every shard has a holder left. It needs no
// communication: a launcher judges with it whether the survivors can
// continue.
func LostBuddyPair(n, d int, lost []int) (rank, buddy int, gone bool) {
	if n < 1 {
		return 0, 0, false
	}
	set := make([]bool, n)
	for _, l := range lost {
		if l >= 0 && l < n {
			set[l] = true
		}
	}
	return lostPair(set, d)
}

// ShardsKept is LostBuddyPair as an error naming the rank and its buddy,
// or nil; a lost rank outside the world is an error too.
func ShardsKept(n, d int, lost []int) error {
	for _, l := range lost {
		if l < 0 || l >= n {
			return fmt.Errorf("zero: lost rank %d is not a rank of the world of %d", l, n)
		}
	}
	if r, b, gone := LostBuddyPair(n, d, lost); gone {
		return fmt.Errorf("zero: rank %d's optimizer shard is gone: its buddy, rank %d, which held the only copy, was lost too; resume from the checkpoint", r, b)
	}
	return nil
}

// transitionOffset is the old world's buddy offset of tr: tr.Offset, or,
// when 0, from's (1 without an old wrapper or buddies). It is an error when
// tr.Offset is given and is not from's.
func transitionOffset[T ddp.Float](from *ZeRO1[T], tr Transition) (int, error) {
	off := tr.Offset
	if from != nil && from.buddy != nil {
		if off != 0 && off != from.buddy.offset {
			return 0, fmt.Errorf("zero: the transition's buddy offset is %d, the old wrapper's %d", off, from.buddy.offset)
		}
		off = from.buddy.offset
	}
	if off == 0 {
		off = 1
	}
	if tr.OldSize >= 2 {
		return off, checkOffset(tr.OldSize, off)
	}
	return off, nil
}

// BuddyOffset is the buddy offset z was wrapped with (rank r's copy on
// rank r+d), 0 without buddies.
func (z *ZeRO1[T]) BuddyOffset() int {
	if z.buddy == nil {
		return 0
	}
	return z.buddy.offset
}
