package zero

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Keeping the state over a failure (the trainer's survivors, issue #34).
//
// Vocabulary:
//   - version: a shard's optimizer state after some number of updates (the
//     version's step) and the shard's parameters then, in shard order.
//   - history: with buddies every rank keeps two versions of each shard it
//     holds, its own and its copy of the left's: the current one and the
//     one before the last update (saved just before each update and each
//     replay). Step is then always one update ahead of, or level with, the
//     last step the rank completed.
//
// A failure can strike between one rank's update of its shard and
// another's: in a ring reduce-scatter some ranks receive their last chunk
// and update while others still wait for the lost rank, and an all-gather
// that fails leaves the arenas half new. The survivors agree on a step S
// (the trainer takes the most advanced member's position) and roll every
// shard to version S. Steps, on every survivor (Recover):
//
//  1. pick, of its own shard and of its left's copy, the version at S
//     (the current one, or the one before the last update): every
//     member's completed steps are S or S-1 and a member that updated in
//     the failed step has the version before, so version S exists for
//     every shard a survivor owns; a lost rank's shard comes from its
//     buddy, whose copy is at S or S+1 (it replays before it all-gathers,
//     and a completed all-gather needs the lost rank's update);
//  2. move the optimizer state to the new world (Regroup), the lost
//     ranks' shards rebuilt from their buddies' versions;
//  3. assemble the parameter arena at S the same way, piece by piece from
//     each piece's owner (or its buddy, for a lost owner): one AllGatherV
//     per bucket into the new wrapper's arena.
//
// Every survivor then holds, bitwise, the parameters and shard states a
// run without the failure holds after S steps: nothing is recomputed.

// version is a shard's state and parameters at one step.
type version[T ddp.Float] struct {
	st     optim.State
	params []T // shard order
	ok     bool
}

// history is the versions before the last update of the own shard and
// the left's copy.
type history[T ddp.Float] struct {
	own, left version[T]
	// updated: the own shard was updated in the step in flight (Step has
	// not completed since).
	updated bool
}

// saveOwn keeps the own shard's version before its update.
func (z *ZeRO1[T]) saveOwn(params []T) {
	h := &z.buddy.hist
	h.own.st, h.own.ok = z.opt.State(), true
	h.own.params = z.packedCopy(params, z.pieces, h.own.params)
	h.updated = true
}

// saveLeft keeps the left's copy before its replay.
func (b *buddy[T]) saveLeft() {
	b.hist.left.st, b.hist.left.ok = b.shadow.State(), true
	b.hist.left.params = append(b.hist.left.params[:0], b.params...)
}

// packedCopy appends the pieces of a, in shard order, to dst[:0].
func (z *ZeRO1[T]) packedCopy(a []T, pieces []Piece, dst []T) []T {
	dst = dst[:0]
	for _, p := range pieces {
		dst = append(dst, a[p.Lo:p.Hi]...)
	}
	return dst
}

// Kept is what a rank with buddies keeps of its wrapper after its group
// failed: both versions of its shard and of its left's copy.
type Kept[T ddp.Float] struct {
	from      *ZeRO1[T]
	own, left [2]version[T] // [0] current, [1] before the last update
	done      int64
}

// Keep captures this rank's versions after a failed Step or Run (no
// communication; the wrapper is not used again). It is an error without
// buddies.
func (z *ZeRO1[T]) Keep() (*Kept[T], error) {
	b := z.buddy
	if b == nil {
		return nil, fmt.Errorf("zero: no buddy copies (WrapWithBuddy): a lost rank's shard is gone; resume from the checkpoint")
	}
	k := &Kept[T]{from: z}
	k.own[0] = version[T]{st: z.opt.State(), params: z.packedCopy(z.d.ParamArena(), z.pieces, nil), ok: true}
	k.left[0] = version[T]{st: b.shadow.State(), params: append([]T(nil), b.params...), ok: true}
	k.own[1], k.left[1] = b.hist.own, b.hist.left
	k.done = k.own[0].st.Step
	if b.hist.updated {
		k.done--
	}
	return k, nil
}

// Done is the optimizer steps of the last Step this rank completed.
func (k *Kept[T]) Done() int64 { return k.done }

// at is the version of vs at step s.
func at[T ddp.Float](vs [2]version[T], s int64) (version[T], bool) {
	for _, v := range vs {
		if v.ok && v.st.Step == s {
			return v, true
		}
	}
	return version[T]{}, false
}

// Recover rolls every shard to its version at step and moves state and
// parameters to to, a fresh wrapper of the same model over the new world
// (steps 1-3 above), as Regroup (tr relates the worlds; no joiners). It
// is a collective over to's group; on error the group is aborted. k is
// not changed: after an error Recover may be called again, over another
// group.
func Recover[T ddp.Float](ctx context.Context, k *Kept[T], to *ZeRO1[T], tr Transition, step int64) error {
	err := recoverState(ctx, k, to, tr, step)
	if err != nil {
		to.group.Abort(err)
	}
	return err
}

func recoverState[T ddp.Float](ctx context.Context, k *Kept[T], to *ZeRO1[T], tr Transition, step int64) error {
	from := k.from
	own, ok := at(k.own, step)
	if !ok {
		return fmt.Errorf("zero: this rank's shard is at step %d, the survivors continue from step %d: no version of it at that step", k.own[0].st.Step, step)
	}
	if err := from.opt.LoadState(own.st); err != nil {
		return fmt.Errorf("zero: rolling the shard to step %d: %w", step, err)
	}
	left, leftOK := at(k.left, step)
	if leftOK {
		if err := from.buddy.shadow.LoadState(left.st); err != nil {
			return fmt.Errorf("zero: rolling the copy of rank %d's shard to step %d: %w", from.buddy.left, step, err)
		}
	}
	p, err := planRegroup(from, to, tr)
	if err != nil {
		return err
	}
	if p.lost[from.buddy.left] && !leftOK {
		return fmt.Errorf("zero: the copy of lost rank %d's shard is at step %d, the survivors continue from step %d: no version of it at that step", from.buddy.left, k.left[0].st.Step, step)
	}
	if err := p.run(ctx); err != nil {
		return err
	}
	arena := to.d.ParamArena()
	var contrib []T
	for bi, r := range to.buckets {
		if contrib, err = gatherBucket(ctx, p, bi, own.params, left.params, arena[r[0]:r[1]], contrib); err != nil {
			return fmt.Errorf("zero: assembling the parameters at step %d: %w", step, err)
		}
	}
	return nil
}

// Wrapper is the failed wrapper the versions were kept from.
func (k *Kept[T]) Wrapper() *ZeRO1[T] { return k.from }

// Check reports, without communication, whether Recover can rebuild every
// shard across tr: an error names a lost rank whose buddy was lost too.
func (k *Kept[T]) Check(tr Transition) error {
	n := tr.OldSize
	stays := make([]bool, n)
	for _, s := range tr.Old {
		if s >= 0 && s < n {
			stays[s] = true
		}
	}
	for r := range n {
		if b := (r + 1) % n; !stays[r] && !stays[b] && b != r {
			return fmt.Errorf("zero: rank %d's optimizer shard is gone: its buddy, rank %d, which held the only copy, was lost too; resume from the checkpoint", r, b)
		}
	}
	return nil
}
