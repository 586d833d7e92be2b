package trainer

import (
	"fmt"
	"math"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/trace"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// ZeRO-1 survivors (Config.ZeroBuddies; docs/elastic.md). A ZeRO-1 rank
// holds only its shard of the optimizer state, and with buddies a copy of
// its left neighbour's: its shard in two versions (now, and at the last
// step it completed), the copy at that step with the left's gradient of
// the step in flight once received (zero.Keep; zero/buddy_keep.go), so
// that every shard can be brought to any member's steps done. Over a
// failure (survive.go) a
// rank keeps those and its group's job-start ranks instead of the whole
// state, and agrees with the new generation's members as follows:
//
//  1. one all-gather of every member's position, optimizer steps done
//     (zero.Kept.Done) and job-start rank;
//  2. the source is picked as for DDP (pickSource: the most steps done,
//     the earliest position, the lowest rank); it broadcasts its
//     position and the epoch's usage; the step every shard is rolled to
//     is the source's steps done;
//  3. the transition from the old world to the new one is read from the
//     job-start ranks (the old world's, kept with the versions; the new
//     one's, gathered in 1): new rank i was old rank Old[i], the old
//     ranks missing were lost;
//  4. zero.Recover rolls every shard to that step (a lost rank's from its
//     buddy), re-shards the state over the new world and assembles the
//     parameters, into the new worker's wrapper.
//
// Every member then holds, bitwise, the parameters and shard states of a
// run without the failure after that step; a lost rank whose buddy was
// lost too (rank r+d, buddyOffset) leaves a shard with no copy, which the
// launcher sees first and answers with a checkpoint restart
// (cmd/train: Elastic.Survives).

// keptShards is what a ZeRO-1 rank carries over a failure.
type keptShards[T Float] struct {
	kept    *zero.Kept[T]
	members []int // the job-start rank of each rank of the old world
}

// keepState is what survive carries of old's optimizer, without
// communication: the whole state (DDP), or the shards' versions (ZeRO-1).
func keepState[T Float](old *worker[T]) (optim.State, *keptShards[T], error) {
	z, ok := old.rep.(*zero.ZeRO1[T])
	if !ok {
		st, err := old.rep.GatherOptimizerState(old.comm, old.g.Rank()) // the local state
		return st, nil, err
	}
	k, err := z.Keep()
	if err != nil {
		return optim.State{}, nil, err
	}
	return optim.State{}, &keptShards[T]{kept: k, members: startRanks(old.members, old.g.Size())}, nil
}

// startRanks is members, or 0..n-1 when nil (generation 0).
func startRanks(members []int, n int) []int {
	if members != nil {
		return slices.Clone(members)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// agreeState agrees on the state with the other members of w's group and
// loads it into w: DDP's whole state from the source (syncState), or
// ZeRO-1's shards (recoverShards). It returns what a later failure starts
// from; mine is untouched.
func agreeState[T Float](w *worker[T], mine snapshot[T], gen rendezvous.Generation) (snapshot[T], error) {
	if mine.zero == nil {
		got, err := syncState(w, mine)
		if err == nil {
			err = w.load(got)
		}
		return got, err
	}
	return recoverShards(w, mine, gen)
}

// recoverShards is steps 1-4 above.
func recoverShards[T Float](w *worker[T], mine snapshot[T], gen rendezvous.Generation) (snapshot[T], error) {
	ctx, g := w.comm, w.g
	p, n := mine.pos, g.Size()
	all := make([]int64, 5*n)
	me := []int64{p.global, int64(p.epoch), int64(p.step), mine.zero.kept.Done(), int64(gen.StartRank)}
	if err := allreduce.AllGather(ctx, g, all, me); err != nil {
		return mine, err
	}
	pos, members := make([]int64, 3*n), make([]int, n)
	for r := range n {
		copy(pos[3*r:3*r+3], all[5*r:5*r+3])
		members[r] = int(all[5*r+4])
	}
	src := pickSource(pos)
	got, err := syncPosition(w, mine, src)
	if err != nil {
		return mine, err
	}
	tr, err := transition(mine.zero.members, members)
	if err == nil {
		err = mine.zero.kept.Check(tr)
	}
	if err != nil {
		// The same on every member, the group intact: survive ends with it
		// (no round again), and the job falls back to its restart policy.
		return mine, fmt.Errorf("trainer: the optimizer shards cannot be rebuilt: %w", err)
	}
	z, ok := w.rep.(*zero.ZeRO1[T])
	if !ok {
		return mine, fmt.Errorf("trainer: the new generation's replica is not ZeRO-1")
	}
	moving := w.rec.Begin(trace.Comm, "elastic", "re-shard")
	err = zero.Recover(ctx, mine.zero.kept, z, tr, all[5*src+3])
	moving.Int("bytes_sent", sentOf(z.LastReshard(), g.Rank())).End()
	if err != nil {
		return mine, fmt.Errorf("trainer: rebuilding the optimizer shards: %w", err)
	}
	w.members = members
	got.arena, got.opt = nil, optim.State{}
	return got, nil
}

// transition relates the new world's ranks, by their job-start ranks
// members, to the old world's, oldMembers.
func transition(oldMembers, members []int) (zero.Transition, error) {
	tr := zero.Transition{OldSize: len(oldMembers)}
	for _, m := range members {
		i := slices.Index(oldMembers, m)
		if i < 0 {
			return tr, fmt.Errorf("trainer: rank %d (at the job's start) is in the new generation but was not in the old one: a ZeRO-1 world grows only through healing", m)
		}
		tr.Old = append(tr.Old, i)
	}
	return tr, nil
}

// syncPosition broadcasts the source's position and the epoch's usage:
// the returned snapshot has them (mine is untouched) and mine's zero.
func syncPosition[T Float](w *worker[T], mine snapshot[T], src int) (snapshot[T], error) {
	ctx, g := w.comm, w.g
	p := mine.pos
	hdr := []int64{int64(p.epoch), int64(p.step), p.global, int64(p.lossSteps), int64(math.Float64bits(p.lossSum))}
	if err := allreduce.Broadcast(ctx, g, hdr, src); err != nil {
		return mine, err
	}
	got := snapshot[T]{
		pos:  position{epoch: int(hdr[0]), step: int(hdr[1]), global: hdr[2], lossSteps: int(hdr[3]), lossSum: math.Float64frombits(uint64(hdr[4]))},
		uses: slices.Clone(mine.uses), zero: mine.zero,
	}
	if err := allreduce.Broadcast(ctx, g, got.uses, src); err != nil {
		return mine, err
	}
	return got, nil
}
