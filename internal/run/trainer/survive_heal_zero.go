package trainer

import (
	"fmt"
	"slices"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/run/heal"
	"github.com/ringddp/ringddp/internal/trace"
	"github.com/ringddp/ringddp/zero"
)

// Healing under ZeRO-1 (Config.ZeroBuddies; docs/elastic.md). The members
// of a grown generation hold what a ZeRO-1 survivor keeps over a failure
// (survive_zero.go: each shard's versions and the old world's job-start
// ranks); the joiner holds nothing. The world grows from N' to N ranks, so
// every shard's boundaries move. Every rank of the generation:
//
//  1. all-gathers its position, optimizer steps done, job-wide name
//     (Generation.StartRank) and rank in the old world (-1 for a joiner)
//     with the old world's size; the transition (new rank i was old rank
//     Old[i], -1 for a joiner) follows, the same on every rank;
//  2. the source is picked among the members as for a failure (pickSource)
//     and broadcasts its position and the epoch's usage to every rank;
//  3. heal.Identify: a joiner of another job or model is refused on every
//     rank before any state moves;
//  4. the members roll every shard to the source's step and re-shard the
//     state over the new world (zero.Recover), while the joiner receives
//     its shard, its buddy copy and the parameters (zero.RecoverJoin):
//     each segment that changes owner moves once, from a rank that holds
//     it to the one that lacks it (a span "re-shard" with this rank's
//     bytes sent, and Healed.ReshardSent), and the parameters at the step
//     are all-gathered from the shards' versions onto every rank, the
//     joiner included (the members' arenas may be half updated);
//  5. heal.Heal sends the position and the usage to the joiner striped
//     over the members, each stripe checked by its SHA-256, and checks
//     that every rank's parameters are bitwise equal (heal.State's
//     ParamsHeld: the joiner holds step 4's, so heal's stream leaves
//     them out);
//  6. zero.CheckShards verifies by SHA-256 every segment of every shard and
//     buddy copy against the rank that held it before the move.
//
// A failure or refusal anywhere aborts the group on every rank: the members
// go round to the next generation from what they kept (the versions are
// untouched), and the joiner ends with the error. The parameters reach the
// joiner once, in step 4; step 5's replica check is their check.

// zeroHealWords are the words of step 1 per rank.
const zeroHealWords = 8

// named is a Survivor that knows this process's job-wide name
// (launch.Survivor).
type named interface{ Name() int }

// healShards is steps 1-6 on w's group; mine is a member's snapshot (its
// zero set), or on a joiner one with no position and zeroed usage. It
// returns the agreed snapshot (the shards are in w's replica).
func (l *rankLoop[T]) healShards(w *worker[T], mine snapshot[T], joiners []int) (snapshot[T], heal.Report, error) {
	ctx, g := w.comm, w.g
	z, ok := w.rep.(*zero.ZeRO1[T])
	if !ok {
		return mine, heal.Report{}, fmt.Errorf("trainer: the new generation's replica is not ZeRO-1")
	}
	joiner := mine.zero == nil
	me, err := l.zeroHealWords(mine)
	if err != nil {
		return mine, heal.Report{}, err
	}
	all := make([]int64, zeroHealWords*g.Size())
	if err := allreduce.AllGather(ctx, g, all, me); err != nil {
		return mine, heal.Report{}, err
	}
	tr, names, src, err := zeroHealPlan(all, joiners)
	if err != nil {
		return mine, heal.Report{}, err
	}
	got, err := syncPosition(w, mine, src)
	if err != nil {
		return mine, heal.Report{}, err
	}
	st := heal.State[T]{JobID: l.cfg.JobID, Params: w.d.ParamArena(), ParamsHeld: true,
		Position: heal.Position{Epoch: got.pos.epoch, StepInEpoch: got.pos.step, GlobalStep: got.pos.global,
			LossSum: got.pos.lossSum, LossSteps: got.pos.lossSteps}}
	if !joiner {
		st.RNG = usageBytes(got.uses)
	}
	if err := heal.Identify(ctx, g, joiners, &st); err != nil {
		return mine, heal.Report{}, err
	}
	var from *zero.ZeRO1[T]
	moving := l.env.rec.Begin(trace.Comm, "elastic", "re-shard")
	if joiner {
		err = zero.RecoverJoin(ctx, z, tr)
	} else {
		from = mine.zero.kept.Wrapper()
		err = zero.Recover(ctx, mine.zero.kept, z, tr, all[zeroHealWords*src+3])
	}
	moving.Int("bytes_sent", sentOf(z.LastReshard(), g.Rank())).End()
	if err != nil {
		return mine, heal.Report{}, fmt.Errorf("trainer: moving the optimizer shards to the grown group: %w", err)
	}
	span := l.env.rec.Begin(trace.Comm, "elastic", "heal").Int("joiners", int64(len(joiners)))
	rep, err := heal.Heal(ctx, g, joiners, &st)
	span.Int("bytes_sent", sentBy(rep, g.Rank())).End()
	if err != nil {
		return mine, rep, err
	}
	if err := zero.CheckShards(ctx, from, z, tr); err != nil {
		return mine, rep, err
	}
	if joiner {
		if len(st.RNG) != 4*len(got.uses) {
			return mine, rep, fmt.Errorf("trainer: the healed example usage is %d bytes, want %d (%d examples)", len(st.RNG), 4*len(got.uses), len(got.uses))
		}
		copy(usageBytes(got.uses), st.RNG)
		got.pos = position{epoch: st.Epoch, step: st.StepInEpoch, global: st.GlobalStep, lossSum: st.LossSum, lossSteps: st.LossSteps}
	}
	w.members = names
	got.arena, got.opt = nil, mine.opt
	return got, rep, nil
}

// sentOf is what rank sent in the re-shard m (0 when m is empty: a move
// that failed before its plan).
func sentOf(m zero.Moved, rank int) int64 {
	if rank < len(m.Sent) {
		return m.Sent[rank]
	}
	return 0
}

// zeroHealWords is this rank's step-1 words: position (global step,
// epoch, step of it), optimizer steps done, name, old rank, old size, the
// old world's buddy offset (0 on a joiner, which has none to tell).
func (l *rankLoop[T]) zeroHealWords(mine snapshot[T]) ([]int64, error) {
	nm, ok := l.cfg.Survive.(named)
	if !ok {
		return nil, fmt.Errorf("trainer: healing under ZeRO-1 needs a Survivor that knows the rank's name")
	}
	name := int64(nm.Name())
	if mine.zero == nil {
		return []int64{-1, -1, -1, -1, name, -1, 0, 0}, nil
	}
	p, old := mine.pos, mine.zero.members
	i := slices.Index(old, int(name))
	if i < 0 {
		return nil, fmt.Errorf("trainer: rank %d (by name) is not in the world it kept (%v)", name, old)
	}
	return []int64{p.global, int64(p.epoch), int64(p.step), mine.zero.kept.Done(), name, int64(i), int64(len(old)), int64(mine.zero.kept.Wrapper().BuddyOffset())}, nil
}

// zeroHealPlan reads step 1's words (all, in rank order): the transition,
// every rank's name, and the source (a member).
func zeroHealPlan(all []int64, joiners []int) (zero.Transition, []int, int, error) {
	n := len(all) / zeroHealWords
	tr := zero.Transition{}
	names := make([]int, n)
	var pos []int64 // the members' (global step, epoch, step), in rank order
	var ranks []int // their ranks
	for r := range n {
		w := all[zeroHealWords*r : zeroHealWords*(r+1)]
		names[r] = int(w[4])
		isJoiner := slices.Contains(joiners, r)
		if isJoiner != (w[5] < 0) {
			return tr, nil, 0, fmt.Errorf("trainer: rank %d of the grown group is %s, but says otherwise", r, map[bool]string{true: "a joiner", false: "a member"}[isJoiner])
		}
		tr.Old = append(tr.Old, int(w[5]))
		if isJoiner {
			continue
		}
		if tr.OldSize != 0 && int(w[6]) != tr.OldSize {
			return tr, nil, 0, fmt.Errorf("trainer: the members come from worlds of %d and %d ranks", tr.OldSize, w[6])
		}
		tr.OldSize = int(w[6])
		if tr.Offset != 0 && int(w[7]) != tr.Offset {
			return tr, nil, 0, fmt.Errorf("trainer: the members come from worlds with buddy offsets %d and %d", tr.Offset, w[7])
		}
		tr.Offset = int(w[7])
		pos = append(pos, w[:3]...)
		ranks = append(ranks, r)
	}
	if len(ranks) == 0 {
		return tr, nil, 0, fmt.Errorf("trainer: the grown group has no member that holds the state")
	}
	return tr, names, ranks[pickSource(pos)], nil
}

// healZeroJoin is a joining rank's start under ZeRO-1 (joinHeal).
func (l *rankLoop[T]) healZeroJoin(w *worker[T], began time.Time) error {
	mine := snapshot[T]{pos: position{global: -1}, uses: make([]int32, len(l.uses.count))}
	got, rep, err := l.healShards(w, mine, l.joinedRanks())
	if err != nil {
		return fmt.Errorf("trainer: joining the job: %w", err)
	}
	l.pos, l.stEpoch = got.pos, got.pos.epoch
	l.uses.count = got.uses
	l.uses.recount()
	l.reportHeal(w, l.joinedRanks(), got, rep, began)
	return nil
}
