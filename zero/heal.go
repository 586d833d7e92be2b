package zero

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Healing a ZeRO-1 world (issue #34, item 3): ranks that lost a member and
// went on (Recover) take a fresh process in again. The world grows from N'
// to N ranks, so every shard's boundaries move: the members re-shard among
// themselves and the joiner receives its shard and its buddy copy.
//
// Vocabulary:
//   - holder: the old rank that holds an element's state before the move:
//     its old owner, or for a lost owner the owner's buddy (its copy). (The
//     re-shard may send a segment of an owner that stays from the owner's
//     buddy's copy, reshard_plan.go: it is checked against the owner's
//     state all the same.)
//   - segment: a range of a bucket on which both layouts agree, a piece of
//     one old rank and of one new rank: the cuts of the old layout and of
//     the new one together cut each bucket into segments.
//
// The joiner's side of Recover is RecoverJoin (the same collectives, with
// nothing to contribute). CheckShards then verifies the move end to end:
//
//  1. every holder hashes (SHA-256) each segment it held, over every state
//     buffer, from the state it contributed;
//  2. one AllGather gives every rank every holder's hashes;
//  3. every rank hashes each segment of its new shard, and of its buddy
//     copy, from the state it now holds, and compares;
//  4. one AllGather of every rank's verdict: a mismatch anywhere is the same
//     error on every rank, naming the rank, the shard, the bucket, the
//     elements and the holder.

// RecoverJoin is a joiner's part of the members' Recover: to, its fresh
// wrapper over the new world, receives its shard of the optimizer state,
// its buddy copy and the parameters at the members' step. tr is the
// members' (Old[i] is -1 for every joiner). It is a collective over to's
// group; on error the group is aborted. The parameters come unchecked:
// the caller checks them against the members' (the trainer's heal, whose
// replica check compares every rank's arena, and whose stream then need
// not carry them again: heal.State.ParamsHeld).
func RecoverJoin[T ddp.Float](ctx context.Context, to *ZeRO1[T], tr Transition) error {
	err := recoverJoin(ctx, to, tr)
	if err != nil {
		to.group.Abort(err)
	}
	return err
}

func recoverJoin[T ddp.Float](ctx context.Context, to *ZeRO1[T], tr Transition) error {
	p, err := planRegroup(nil, to, tr)
	if err != nil {
		return err
	}
	if err := p.move(ctx); err != nil {
		return err
	}
	arena := to.d.ParamArena()
	var contrib []T
	for bi, r := range to.buckets {
		if contrib, err = gatherBucket(ctx, p, bi, nil, nil, arena[r[0]:r[1]], contrib); err != nil {
			return fmt.Errorf("zero: receiving the parameters: %w", err)
		}
	}
	return nil
}

// segment is one segment of a bucket, in arena elements.
type segment struct {
	bucket, lo, hi int
	oldOwner       int // the old rank whose piece it is in
	newOwner       int // the new rank whose piece it is in
}

// segments are the segments of every bucket, for an old world of n ranks
// and a new one of m.
func segments(buckets [][2]int, n, m int) []segment {
	var out []segment
	for bi, r := range buckets {
		bl := r[1] - r[0]
		cuts := []int{0, bl}
		for _, k := range []int{n, m} {
			for j := range k {
				lo, _ := allreduce.ChunkBounds(bl, k, j)
				cuts = append(cuts, lo)
			}
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		o, w := 0, 0
		for i := 0; i+1 < len(cuts); i++ {
			lo, hi := cuts[i], cuts[i+1]
			for _, ohi := allreduce.ChunkBounds(bl, n, o); ohi <= lo; _, ohi = allreduce.ChunkBounds(bl, n, o) {
				o++
			}
			for _, whi := allreduce.ChunkBounds(bl, m, w); whi <= lo; _, whi = allreduce.ChunkBounds(bl, m, w) {
				w++
			}
			out = append(out, segment{bucket: bi, lo: r[0] + lo, hi: r[0] + hi, oldOwner: o, newOwner: w})
		}
	}
	return out
}

// segmentHash is the SHA-256 of s's elements of every buffer of st, a
// shard state laid out as pieces (the pieces' bucket s.bucket holds s).
func segmentHash(st optim.State, pieces []Piece, s segment) [4]int64 {
	h := sha256.New()
	var b [8]byte
	if st.Len > 0 {
		p := pieces[s.bucket]
		for _, buf := range st.Buffers {
			for _, v := range buf.Data[p.Off+s.lo-p.Lo : p.Off+s.hi-p.Lo] {
				binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
				h.Write(b[:])
			}
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	var w [4]int64
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(sum[8*i:]))
	}
	return w
}

// CheckShards verifies, by SHA-256, that the optimizer state Recover or
// RecoverJoin (or Regroup) moved to to is the state its holders held
// (steps 1-4 above). from is this rank's old wrapper after the move (nil
// on a joiner), tr the move's transition. It is a collective over to's
// group; every rank returns the same verdict.
func CheckShards[T ddp.Float](ctx context.Context, from, to *ZeRO1[T], tr Transition) error {
	p, err := planRegroup(from, to, tr)
	if err != nil {
		to.group.Abort(err)
		return err
	}
	segs := segments(to.buckets, p.n, to.group.Size())
	m := to.group.Size()
	mine := make([]int64, 4*len(segs))
	for i, s := range segs {
		if h := p.holder(s.oldOwner); h == p.old && p.old >= 0 {
			st, pieces := p.own, from.pieces
			if h != s.oldOwner {
				st, pieces = p.left, from.buddy.leftPieces
			}
			w := segmentHash(st, pieces, s)
			copy(mine[4*i:], w[:])
		}
	}
	all := make([]int64, m*len(mine))
	if err := allreduce.AllGather(ctx, to.group, all, mine); err != nil {
		return fmt.Errorf("zero: exchanging the optimizer state's checksums: %w", err)
	}
	bad := p.firstMismatch(segs, all)
	verdicts := make([]int64, 2*m)
	if err := allreduce.AllGather(ctx, to.group, verdicts, bad[:]); err != nil {
		return fmt.Errorf("zero: exchanging the optimizer state's verdicts: %w", err)
	}
	for r := range m {
		if i, copyOf := verdicts[2*r], verdicts[2*r+1]; i >= 0 && int(i) < len(segs) {
			s := segs[i]
			what := "optimizer shard"
			if copyOf >= 0 {
				what = fmt.Sprintf("copy of rank %d's optimizer shard", copyOf)
			}
			err := fmt.Errorf("zero: rank %d's %s (bucket %d, elements [%d, %d) of the arena, held by rank %d before the move) failed its SHA-256 check: the state moved is not the state held; nothing may train on it",
				r, what, s.bucket, s.lo, s.hi, p.newOf[p.holder(s.oldOwner)])
			to.group.Abort(err)
			return err
		}
	}
	return nil
}

// holder is the old rank that holds old rank o's piece: o, or its buddy
// when o was lost.
func (p *reshard[T]) holder(o int) int {
	if p.lost[o] {
		return (o + p.off) % p.n
	}
	return o
}

// firstMismatch is this rank's verdict: the first segment of its shard or
// buddy copy whose hash is not its holder's, and whose copy it is (-1 for
// its own shard), or {-1, -1}.
func (p *reshard[T]) firstMismatch(segs []segment, all []int64) [2]int64 {
	to := p.to
	rank, m := to.group.Rank(), to.group.Size()
	own := to.opt.State()
	var left optim.State
	leftRank := -1
	if to.buddy != nil {
		left, leftRank = to.buddy.shadow.State(), to.buddy.left
	}
	per := len(all) / m
	for i, s := range segs {
		var got [4]int64
		switch s.newOwner {
		case rank:
			got = segmentHash(own, to.pieces, s)
		case leftRank:
			got = segmentHash(left, to.buddy.leftPieces, s)
		default:
			continue
		}
		from := p.newOf[p.holder(s.oldOwner)]
		if !slices.Equal(got[:], all[from*per+4*i:from*per+4*i+4]) {
			if s.newOwner == rank {
				return [2]int64{int64(i), -1}
			}
			return [2]int64{int64(i), int64(leftRank)}
		}
	}
	return [2]int64{-1, -1}
}
