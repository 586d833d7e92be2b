package zero

import (
	"cmp"
	"fmt"
	"slices"
)

// The plan of a re-shard that moves only what changes owner (issue #34).
// An old world of n ranks becomes a new one of m (Transition: ranks lost,
// joiners, or both). Every rank computes the same plan from shared data
// alone, so the plan itself costs no communication.
//
// Vocabulary (segments as in heal.go: the old and the new cuts of every
// bucket together cut it into segments, each inside one old rank's piece
// and one new rank's):
//   - holder: a rank of the new world whose old state holds a segment at
//     the step moved: the segment's old owner (in its own shard) and the
//     old owner's buddy, old rank o+d mod n for the old world's buddy
//     offset d (in its copy of o's shard),
//     when that rank stays and its copy is at the step (copyOK).
//   - receiver: a rank that holds the segment after the move: its new
//     owner w (in its own shard) and, when the new world keeps buddies,
//     w's new buddy, w+d' mod m for the new world's offset d' (in its
//     copy of w's shard).
//   - move: one segment to one receiver that is not a holder, from one
//     holder (its sender); a receiver that is a holder copies it in
//     memory (a local move).
//
// Steps:
//
//  1. cut every bucket into segments (segments, heal.go);
//  2. for every segment and receiver: a local move when the receiver is a
//     holder, else a move to be given a sender;
//  3. senders, largest segment first: the holder that has been given the
//     fewest elements so far (ties: the owner), so that where a segment
//     has two holders the work is balanced between them;
//  4. the pairs of ranks that exchange moves are edge-coloured greedily,
//     in rank order (each rank in at most one pair per colour): a colour
//     is a round, and a round's pairs run at once (reshard_move.go).
//
// Elements sent: a receiver lacks exactly the elements of its new shard
// (and new copy) that neither its old shard nor its old copy covers, and
// each is sent once: the sum over ranks is, over every element, the
// number of its receivers that are not its holders (at most 2 per
// element), where an all-gather of the state sends every rank m-1 times
// it (the figures for 4 → 3 and 3 → 4 ranks are in docs/elastic.md).

// move is one segment from a sender's old state to a receiver's new one;
// from == to for a local move.
type move struct {
	seg      segment
	from     int  // the sender, a rank of the new world
	fromCopy bool // it reads its old copy of its left's shard, else its old own shard
	to       int  // the receiver, a rank of the new world
	toCopy   bool // it writes its new copy of its left's shard, else its new own shard
}

// movePlan is a re-shard's plan, the same on every rank.
type movePlan struct {
	local  []move     // moves within one rank
	moves  []move     // moves between ranks, in plan order
	rounds [][][2]int // by round: its pairs (lower rank, higher rank)
	sent   []int      // by new rank: elements it sends, per state buffer
}

// holderOf is one holder of a segment.
type holderOf struct {
	rank int
	copy bool
}

// planMoves plans the re-shard of an arena cut into buckets from an old
// world of n ranks to the new one whose ranks were oldOf (old rank, -1 for
// a joiner); copyOK[o] says old rank o holds a copy of its left's shard at
// the step moved; off is the old world's buddy offset, newOff the new
// world's (0: it keeps no copies). It is an error when a segment has no
// holder.
func planMoves(buckets [][2]int, n int, oldOf []int, copyOK []bool, off, newOff int) (movePlan, error) {
	m := len(oldOf)
	newOf := make([]int, n)
	for o := range newOf {
		newOf[o] = -1
	}
	for w, o := range oldOf {
		if o >= 0 {
			newOf[o] = w
		}
	}
	holders := func(o int) []holderOf {
		var hs []holderOf
		if newOf[o] >= 0 {
			hs = append(hs, holderOf{rank: newOf[o]})
		}
		if b := (o + off) % n; b != o && newOf[b] >= 0 && copyOK[b] {
			hs = append(hs, holderOf{rank: newOf[b], copy: true})
		}
		return hs
	}
	p := movePlan{sent: make([]int, m)}
	var pending []move // step 2's moves, senders not yet given
	for _, s := range segments(buckets, n, m) {
		if s.hi == s.lo {
			continue
		}
		hs := holders(s.oldOwner)
		if len(hs) == 0 {
			return movePlan{}, fmt.Errorf("zero: no rank holds old rank %d's optimizer shard (elements [%d, %d) of the arena): resume from the checkpoint", s.oldOwner, s.lo, s.hi)
		}
		receivers := []move{{seg: s, to: s.newOwner}}
		if newOff > 0 {
			receivers = append(receivers, move{seg: s, to: (s.newOwner + newOff) % m, toCopy: true})
		}
		for _, mv := range receivers {
			if i := slices.IndexFunc(hs, func(h holderOf) bool { return h.rank == mv.to }); i >= 0 {
				mv.from, mv.fromCopy = mv.to, hs[i].copy
				p.local = append(p.local, mv)
				continue
			}
			pending = append(pending, mv)
		}
	}
	// Step 3, largest first; the stable sort keeps plan order among equals.
	order := make([]int, len(pending))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(pending[b].seg.hi-pending[b].seg.lo, pending[a].seg.hi-pending[a].seg.lo)
	})
	for _, i := range order {
		mv := &pending[i]
		hs := holders(mv.seg.oldOwner)
		best := hs[0]
		for _, h := range hs[1:] {
			if p.sent[h.rank] < p.sent[best.rank] {
				best = h
			}
		}
		mv.from, mv.fromCopy = best.rank, best.copy
		p.sent[best.rank] += mv.seg.hi - mv.seg.lo
	}
	p.moves = pending
	p.rounds = colourPairs(pending)
	return p, nil
}

// colourPairs is step 4: the pairs of ranks that exchange moves, in rank
// order, each given the least round in which neither rank is busy yet.
func colourPairs(moves []move) [][][2]int {
	var pairs [][2]int
	for _, mv := range moves {
		pairs = append(pairs, [2]int{min(mv.from, mv.to), max(mv.from, mv.to)})
	}
	slices.SortFunc(pairs, func(a, b [2]int) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	pairs = slices.Compact(pairs)
	var rounds [][][2]int
	busy := map[[2]int]bool{} // (round, rank)
	for _, pr := range pairs {
		c := 0
		for busy[[2]int{c, pr[0]}] || busy[[2]int{c, pr[1]}] {
			c++
		}
		busy[[2]int{c, pr[0]}], busy[[2]int{c, pr[1]}] = true, true
		if c == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[c] = append(rounds[c], pr)
	}
	return rounds
}
