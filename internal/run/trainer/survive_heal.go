package trainer

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/run/heal"
	"github.com/ringddp/ringddp/internal/trace"
	"github.com/ringddp/ringddp/zero"
)

// Healing (docs/elastic.md): a generation the launcher grew — ranks that
// joined at its start, started to replace a lost rank or held as spares —
// agrees on the state differently from one that only lost ranks
// (survive.go's syncState):
//
//  1. the members that were in the job before (the senders) all-gather
//     their positions, a joiner reporting none; when they differ (a
//     failure landed between one member's last collective of a step and
//     another's), syncState makes them equal first (the joiner takes the
//     source's state then too);
//  2. heal.Heal sends the senders' state to the joiners: parameters,
//     optimizer state, position and the epoch's example usage (the RNG
//     bytes heal carries opaquely: the data order is a function of the
//     seed, the epoch and the position, so this is all the randomness a
//     rank holds), striped over the senders, each stripe checked by its
//     SHA-256, after heal's identity check (the job id, the model's shape,
//     the optimizer's kind) and before its replica check (every rank's
//     parameters and optimizer state bitwise equal);
//  3. a refusal or a failure is the same on every member: the group is
//     aborted, so the members go round to the next generation without the
//     joiner (survive.go), and the joiner ends with the error.
//
// The step that was in flight when the launcher asked for the grow (just
// after a step boundary) is dropped and redone, as after a failure.
//
// Under ZeRO-1 (with buddies) a member holds only its shards' versions and
// the joiner's optimizer shard comes from a re-shard over the grown group:
// survive_heal_zero.go.

// healingSurvivor is a Survivor that grows the group back (launch.Survivor).
type healingSurvivor interface {
	// Joining reports whether this process was started to join.
	Joining() bool
	// JoinedRanks are the ranks of the current generation that joined at
	// its start.
	JoinedRanks() []int
}

// Healed is one heal, as rank 0 of the grown generation saw it
// (Config.OnHeal).
type Healed struct {
	Joined     []int // the joined ranks' ranks in the generation
	GlobalStep int64 // the step the generation goes on from
	// Paused is from this rank's group failing (the grow's abort) to the
	// state agreed; Heal is heal.Heal's part of it.
	Paused, Heal time.Duration
	Report       heal.Report // the bytes each rank sent, the state's size
	// ReshardSent is, under ZeRO-1, the optimizer state's bytes each rank
	// sent to re-shard it over the grown group (zero.Moved; by rank in
	// the generation), beside heal's stream; nil under DDP.
	ReshardSent []int64
}

// joiningSurvivor reports whether cfg's Survivor was started to join.
func joining(cfg Config) bool {
	h, ok := cfg.Survive.(healingSurvivor)
	return ok && h.Joining()
}

// joinedRanks are the current generation's joined ranks (none without a
// healing Survivor).
func (l *rankLoop[T]) joinedRanks() []int {
	if h, ok := l.cfg.Survive.(healingSurvivor); ok {
		return h.JoinedRanks()
	}
	return nil
}

// agree is survive.go's step 4 on w's new group: syncState, or with
// joiners the heal above. On a heal's failure the group is aborted (the
// members go round again).
func (l *rankLoop[T]) agree(w *worker[T], mine snapshot[T], gen rendezvous.Generation, began time.Time) (snapshot[T], error) {
	joiners := l.joinedRanks()
	if len(joiners) == 0 {
		return agreeState(w, mine, gen) // loads it too
	}
	var got snapshot[T]
	var rep heal.Report
	var err error
	if mine.zero != nil {
		got, rep, err = l.healShards(w, mine, joiners) // survive_heal_zero.go
	} else if got, rep, err = l.healGroup(w, mine, joiners, false); err == nil {
		err = w.load(got)
	}
	if err != nil {
		w.g.Abort(err)
		return mine, err
	}
	l.reportHeal(w, joiners, got, rep, began)
	return got, nil
}

// joinHeal is a joining rank's start: it takes the members' state over its
// first group (w's) and goes on from their position.
func (l *rankLoop[T]) joinHeal() error {
	began := time.Now()
	w := l.w
	if _, ok := w.rep.(*zero.ZeRO1[T]); ok {
		return l.healZeroJoin(w, began) // survive_heal_zero.go
	}
	st, err := w.rep.GatherOptimizerState(w.comm, w.g.Rank()) // a fresh optimizer: its kind, no state
	if err != nil {
		return fmt.Errorf("trainer: joining: %w", err)
	}
	mine := snapshot[T]{pos: position{global: -1}, uses: make([]int32, len(l.uses.count)),
		arena: slices.Clone(w.d.ParamArena()), opt: st}
	got, rep, err := l.healGroup(w, mine, l.joinedRanks(), true)
	if err != nil {
		return fmt.Errorf("trainer: joining the job: %w", err)
	}
	if err := w.load(got); err != nil {
		return err
	}
	l.pos, l.stEpoch = got.pos, got.pos.epoch
	l.uses.count = got.uses
	l.uses.recount()
	l.reportHeal(w, l.joinedRanks(), got, rep, began)
	return nil
}

// healGroup is steps 1 and 2 above on w's group; joiner says whether this
// rank is one of joiners.
func (l *rankLoop[T]) healGroup(w *worker[T], mine snapshot[T], joiners []int, joiner bool) (snapshot[T], heal.Report, error) {
	g := w.g
	p := mine.pos
	all := make([]int64, 3*g.Size())
	if err := allreduce.AllGather(w.comm, g, all, []int64{p.global, int64(p.epoch), int64(p.step)}); err != nil {
		return mine, heal.Report{}, err
	}
	if !sendersAgree(all, joiners) {
		var err error
		if mine, err = syncState(w, mine); err != nil {
			return mine, heal.Report{}, err
		}
	}
	if !joiner {
		if err := w.load(mine); err != nil {
			return mine, heal.Report{}, err
		}
	}
	st := heal.State[T]{JobID: l.cfg.JobID, Params: w.d.ParamArena(), Optim: mine.opt,
		Position: heal.Position{Epoch: mine.pos.epoch, StepInEpoch: mine.pos.step, GlobalStep: mine.pos.global,
			LossSum: mine.pos.lossSum, LossSteps: mine.pos.lossSteps}}
	if !joiner {
		st.RNG = usageBytes(mine.uses)
	}
	span := l.env.rec.Begin(trace.Comm, "elastic", "heal").Int("joiners", int64(len(joiners)))
	rep, err := heal.Heal(w.comm, g, joiners, &st)
	span.Int("bytes_sent", sentBy(rep, g.Rank())).End()
	if err != nil {
		return mine, rep, err
	}
	if !joiner {
		return mine, rep, nil
	}
	if len(st.RNG) != 4*len(mine.uses) {
		return mine, rep, fmt.Errorf("trainer: the healed example usage is %d bytes, want %d (%d examples)", len(st.RNG), 4*len(mine.uses), len(mine.uses))
	}
	got := snapshot[T]{
		pos:  position{epoch: st.Epoch, step: st.StepInEpoch, global: st.GlobalStep, lossSum: st.LossSum, lossSteps: st.LossSteps},
		uses: make([]int32, len(mine.uses)), arena: slices.Clone(st.Params), opt: st.Optim,
	}
	copy(usageBytes(got.uses), st.RNG)
	return got, rep, nil
}

// sendersAgree reports whether the members not in joiners are at the same
// position, given every rank's (global step, epoch, step) in rank order.
func sendersAgree(all []int64, joiners []int) bool {
	ref := -1
	for r := 0; 3*r+3 <= len(all); r++ {
		if slices.Contains(joiners, r) {
			continue
		}
		if ref < 0 {
			ref = r
			continue
		}
		if !slices.Equal(all[3*r:3*r+3], all[3*ref:3*ref+3]) {
			return false
		}
	}
	return true
}

// usageBytes views usage counts as bytes.
func usageBytes(u []int32) []byte {
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 4*len(u))
}

func sentBy(rep heal.Report, rank int) int64 {
	if rank < len(rep.Sent) {
		return rep.Sent[rank]
	}
	return 0
}

// reportHeal tells Config.OnHeal of the heal, on the generation's rank 0.
func (l *rankLoop[T]) reportHeal(w *worker[T], joiners []int, got snapshot[T], rep heal.Report, began time.Time) {
	if w.g.Rank() != 0 || l.cfg.OnHeal == nil {
		return
	}
	h := Healed{Joined: joiners, GlobalStep: got.pos.global,
		Paused: time.Since(began), Heal: rep.Duration, Report: rep}
	h.ReshardSent = reshardSentOf(w)
	l.cfg.OnHeal(h)
}

// reshardSentOf is, under ZeRO-1, the optimizer state's bytes each rank
// of w's group sent in its last re-shard; nil under DDP.
func reshardSentOf[T Float](w *worker[T]) []int64 {
	if z, ok := w.rep.(*zero.ZeRO1[T]); ok {
		return z.LastReshard().Sent
	}
	return nil
}
