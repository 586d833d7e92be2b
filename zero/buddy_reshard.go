package zero

import (
	"context"
	"fmt"
	"slices"

	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Re-sharding after a loss. The old world of N ranks loses the ranks in
// lost; the survivors, numbered 0..N'-1 in their old order, form a new group
// and a new wrapper over it. Every element of the optimizer state must end
// on its owner in the new layout (Pieces over N' ranks) and on that owner's
// buddy: it is there already, or it moves once from a rank that holds it
// (its old owner, or the owner's buddy from its copy). The plan is
// reshard_plan.go's, its run reshard_move.go's: only what changes owner
// moves, point to point. The state each survivor then holds is bitwise
// what a run without the loss holds for the same elements: nothing is
// recomputed.

// Reshard rebuilds the shards of the lost ranks from their buddies' copies
// and re-shards the whole optimizer state over the survivors. from is this
// rank's wrapper in the old world (made by WrapWithBuddy), to a fresh
// wrapper of the same model over the survivors' group (Wrap, or
// WrapWithBuddy when 2 or more survive), in which survivors are numbered in
// their old order; lost lists the old ranks lost, the same on every
// survivor. It is a collective over to's group. A lost rank whose buddy was
// lost too is an error naming both: its shard is gone, and the caller must
// resume from a checkpoint. On error to's group is aborted.
func Reshard[T ddp.Float](ctx context.Context, from, to *ZeRO1[T], lost []int) error {
	n := from.group.Size()
	gone := make([]bool, n)
	for _, k := range lost {
		if k >= 0 && k < n {
			gone[k] = true
		}
	}
	tr := Transition{OldSize: n}
	for s := range n {
		if !gone[s] {
			tr.Old = append(tr.Old, s)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(lost)))) != len(lost) || len(tr.Old)+len(lost) != n {
		err := fmt.Errorf("zero: lost ranks %v: want distinct ranks of the old world of %d", lost, n)
		to.group.Abort(err)
		return err
	}
	return Regroup(ctx, from, to, tr)
}

// Transition relates a new world's ranks to an old one's: Old[i] is new
// rank i's rank in the old world of OldSize ranks, or -1 for a joiner (a
// fresh process). Old ranks not in Old were lost; the ranks that stay keep
// their order. Offset is the old world's buddy offset (WrapWithBuddyAt),
// 0 for the old wrapper's (1 on a joiner, which has none): a joiner of a
// world whose offset is not 1 needs it.
type Transition struct {
	OldSize int
	Old     []int
	Offset  int
}

// Regroup re-shards the optimizer state from an old world to a new one
// that lost ranks (their shards rebuilt from their buddies' copies, as
// Reshard), gained joiners, or both: every rank of to's group calls it,
// with from its wrapper in the old world, nil on a joiner, and the same
// tr. A joiner's to receives its shard (and its buddy copy) from the ranks
// that hold them. It is a collective over to's group; on error the group
// is aborted.
func Regroup[T ddp.Float](ctx context.Context, from, to *ZeRO1[T], tr Transition) error {
	p, err := planRegroup(from, to, tr)
	if err == nil {
		err = p.move(ctx)
	}
	if err != nil {
		to.group.Abort(err)
	}
	return err
}

// reshard is one rank's plan.
type reshard[T ddp.Float] struct {
	from, to  *ZeRO1[T] // from is nil on a joiner
	n         int       // the old world's size
	old       int       // this rank in the old world, -1 on a joiner
	oldOf     []int     // by new rank: its old rank, -1 for a joiner
	newOf     []int     // by old rank: its new rank, -1 if lost
	lost      []bool    // by old rank
	off       int       // the old world's buddy offset
	own, left optim.State
}

func planRegroup[T ddp.Float](from, to *ZeRO1[T], tr Transition) (p *reshard[T], err error) {
	n, rank := tr.OldSize, to.group.Rank()
	if len(tr.Old) != to.group.Size() || n < 1 {
		return nil, fmt.Errorf("zero: a transition of %d new ranks from %d old ones, for a group of %d", len(tr.Old), n, to.group.Size())
	}
	p = &reshard[T]{from: from, to: to, n: n, old: tr.Old[rank], oldOf: tr.Old, newOf: make([]int, n), lost: make([]bool, n)}
	for s := range p.newOf {
		p.newOf[s], p.lost[s] = -1, true
	}
	last := -1
	for i, s := range tr.Old {
		if s == -1 {
			continue
		}
		if s < 0 || s >= n || s <= last {
			return nil, fmt.Errorf("zero: transition %v: old ranks must be in [0, %d), distinct and in order", tr.Old, n)
		}
		p.newOf[s], p.lost[s], last = i, false, s
	}
	if last < 0 {
		return nil, fmt.Errorf("zero: transition %v keeps no old rank: nobody holds the state; resume from the checkpoint", tr.Old)
	}
	if (from == nil) != (p.old == -1) {
		return nil, fmt.Errorf("zero: new rank %d is old rank %d of the transition, but has %s old wrapper", rank, p.old, map[bool]string{true: "no", false: "an"}[from == nil])
	}
	if p.off, err = transitionOffset(from, tr); err != nil {
		return nil, err
	}
	if from == nil {
		return p, nil
	}
	if from.group.Size() != n || from.group.Rank() != p.old {
		return nil, fmt.Errorf("zero: the old wrapper is rank %d of %d, the transition says rank %d of %d", from.group.Rank(), from.group.Size(), p.old, n)
	}
	if k := slices.Index(p.lost, true); k >= 0 && from.buddy == nil {
		return nil, fmt.Errorf("zero: rank %d's optimizer shard is lost: the run has no buddy copies (WrapWithBuddy); resume from the checkpoint", k)
	}
	if k, b, gone := lostPair(p.lost, p.off); gone {
		return nil, fmt.Errorf("zero: rank %d's optimizer shard is gone: its buddy, rank %d, which held the only copy, was lost too; resume from the checkpoint", k, b)
	}
	if to.total != from.total || !slices.Equal(to.buckets, from.buckets) {
		return nil, fmt.Errorf("zero: the new wrapper's arena (%d elements, %d buckets) is not the old one's (%d, %d): the same model and bucket sizes are needed", to.total, len(to.buckets), from.total, len(from.buckets))
	}
	p.own = from.opt.State()
	if from.buddy != nil {
		p.left = from.buddy.shadow.State()
		if left := from.buddy.left; p.lost[left] && (p.left.Step != p.own.Step || len(p.left.Buffers) != len(p.own.Buffers)) {
			return nil, fmt.Errorf("zero: the buddy copy (step %d, %d buffers) does not match the shard's state (step %d, %d buffers)", p.left.Step, len(p.left.Buffers), p.own.Step, len(p.own.Buffers))
		}
	}
	return p, nil
}
