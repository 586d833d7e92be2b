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
//   - done: the optimizer steps of the last Step this rank completed.
//   - with buddies every rank holds two versions of its own shard: the
//     current one (the optimizer's, at done, or done+1 once it updated in
//     the step in flight) and self's, at done (buddy.go: the update is
//     replayed on self after the all-gather). Of its left's shard it holds
//     the copy, at done too, and, once the exchange of the step in flight
//     has completed, the left's gradient of that step: replaying it brings
//     the copy to done+1.
//
// Nothing is copied per step for this: self and the copy are kept by
// replaying updates, and the versions are taken only when a step fails.
//
// A failure can strike between one rank's update of its shard and
// another's: in a ring reduce-scatter some ranks receive their last chunk
// and update while others still wait for the lost rank, and an all-gather
// that fails leaves the arenas half new. The survivors agree on a step S
// (the trainer takes the most advanced member's position: S is the
// greatest done) and roll every shard to version S. Steps, on every
// survivor (Recover):
//
//  1. pick, of its own shard and of its left's copy, the version at S.
//     Every member's done is S or S-1, and a member at S-1 had updated its
//     shard to S (the all-gather that completed S elsewhere needed its
//     piece): the current version or self's is at S. A lost rank's shard
//     comes from its buddy: the buddy's copy is at its done, S or S-1, and
//     at S-1 the buddy holds the left's gradient of step S (it waits for
//     it before the all-gather, which completed elsewhere, so the buddy
//     had entered it) and replays it;
//  2. move the optimizer state to the new world (Regroup), the lost
//     ranks' shards rebuilt from their buddies' versions;
//  3. assemble the parameter arena at S the same way, piece by piece from
//     each piece's owner (or its buddy, for a lost owner): one AllGatherV
//     per bucket into the new wrapper's arena.
//
// Every survivor then holds, bitwise, the parameters and shard states a
// run without the failure holds after S steps: nothing is recomputed but
// the one replay of step 1.

// version is a shard's state and parameters at one step.
type version[T ddp.Float] struct {
	st     optim.State
	params []T // shard order
	ok     bool
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
// failed: both versions of its shard, its left's copy and the left's
// gradient of the failed step when it had arrived.
type Kept[T ddp.Float] struct {
	from *ZeRO1[T]
	own  [2]version[T] // [0] current, [1] self's (at done)
	left version[T]    // the copy (at done)
	// pending is the left's gradient of the failed step, nil when it had
	// not arrived; lr that step's learning rate.
	pending []T
	lr      float64
	done    int64
}

// Keep captures this rank's versions after a failed Step or Run (no
// communication; the wrapper is not used again). It is an error without
// buddies.
func (z *ZeRO1[T]) Keep() (*Kept[T], error) {
	b := z.buddy
	if b == nil {
		return nil, fmt.Errorf("zero: no buddy copies (WrapWithBuddy): a lost rank's shard is gone; resume from the checkpoint")
	}
	arena := z.d.ParamArena()
	if !b.primed {
		b.prime(arena) // no step began since the state was set: the arena is whole
	}
	k := &Kept[T]{from: z, done: b.self.Steps()}
	k.own[0] = version[T]{st: z.opt.State(), params: z.packedCopy(arena, z.pieces, nil), ok: true}
	k.own[1] = version[T]{st: b.self.State(), params: append([]T(nil), b.selfParams...), ok: true}
	k.left = version[T]{st: b.shadow.State(), params: append([]T(nil), b.params...), ok: true}
	if b.received {
		k.pending, k.lr = append([]T(nil), b.grad...), b.lr
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

// leftAt is the left's copy at step s: the copy, or the copy with the
// pending gradient replayed on it (in the old wrapper's shadow, which is
// loaded from the kept copy first, so that k stays as it was).
func (k *Kept[T]) leftAt(s int64) (version[T], bool, error) {
	if k.left.st.Step == s {
		return k.left, true, nil
	}
	if k.pending == nil || k.left.st.Step+1 != s {
		return version[T]{}, false, nil
	}
	b := k.from.buddy
	if err := b.shadow.LoadState(k.left.st); err != nil {
		return version[T]{}, false, fmt.Errorf("zero: rolling the copy of rank %d's shard to step %d: %w", b.left, s, err)
	}
	params := append([]T(nil), k.left.params...)
	if err := replay(b.shadow, k.lr, params, k.pending); err != nil {
		return version[T]{}, false, fmt.Errorf("zero: replaying rank %d's update of step %d on its copy: %w", b.left, s, err)
	}
	return version[T]{st: b.shadow.State(), params: params, ok: true}, true, nil
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
	left, leftOK, err := k.leftAt(step)
	if err != nil {
		return err
	}
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
		return fmt.Errorf("zero: the copy of lost rank %d's shard is at step %d, the survivors continue from step %d: no version of it at that step", from.buddy.left, k.left.st.Step, step)
	}
	if err := p.move(ctx); err != nil {
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
	lost := make([]bool, n)
	for i := range lost {
		lost[i] = true
	}
	for _, s := range tr.Old {
		if s >= 0 && s < n {
			lost[s] = false
		}
	}
	off, err := transitionOffset(k.from, tr)
	if err != nil {
		return err
	}
	if r, b, gone := lostPair(lost, off); gone {
		return fmt.Errorf("zero: rank %d's optimizer shard is gone: its buddy, rank %d, which held the only copy, was lost too; resume from the checkpoint", r, b)
	}
	return nil
}
