package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/trace"
	"github.com/ringddp/ringddp/optim"
)

// Survivors continue (Config.Survive; docs/elastic.md). When a rank's
// group fails — a peer died, or stalled past the transport's timeout, or
// the Survivor's watch saw another member report a fault and aborted the
// collective in flight — the rank, in the same process:
//
//  1. keeps what it holds: the parameter arena, the optimizer state, its
//     position and the epoch's example usage (a snapshot, untouched until
//     a new generation has agreed on its state);
//  2. drops the step in flight (its position counts only finished steps),
//     closes the failed group and rejoins: Survivor.Rejoin reports the
//     fault, checks in and dials the next generation's mesh, where it may
//     have another rank and world size;
//  3. rebuilds its worker on the new group: sampler (its share of each
//     global batch under the new rank and world size), graph (the new
//     per-rank batch), replica and evaluator;
//  4. agrees on the state: one all-gather of every member's position
//     picks the source, the member with the most optimizer steps done
//     (a failure can strike after some ranks finished a step's last
//     collective and before others did), among those the earliest
//     position (an epoch end redone rather than skipped), lowest rank
//     first; the source broadcasts its position, usage, parameters and
//     optimizer state, and every member loads them (so the replicas are
//     bitwise equal again); ZeRO-1 with buddies instead rolls every
//     shard to the source's step from the versions each rank kept and
//     re-shards them over the new world (survive_zero.go);
//  5. goes on from that position: the step that was in flight is redone
//     by the new generation, on the same global batch.
//
// A failure during 2-4 (a second rank lost) goes round again from the
// snapshot; a rank the launcher removed gets its refusal from Rejoin and
// ends with it.

// Survivor is a rank's side of a job whose survivors continue after a
// failure (launch.Survivor implements it).
type Survivor interface {
	// Watch calls abort, once, when the current generation fails
	// elsewhere (another member or the launcher reported it); stop ends
	// the watch.
	Watch(abort func(error)) (stop func())
	// Rejoin reports cause as this rank's failure of the current
	// generation and returns its endpoint of the next, or why this rank
	// does not go on (removed, or the job falls back to a restart).
	Rejoin(ctx context.Context, cause error) (transport.Conn, rendezvous.Generation, error)
}

// survivable reports whether err, which ended a step or an epoch's end,
// is a failure of the group that survivors continue after.
func (l *rankLoop[T]) survivable(err error) bool {
	return l.cfg.Survive != nil && l.ctx.Err() == nil && l.w.g.Err() != nil
}

// snapshot is what a rank carries over a failure.
type snapshot[T Float] struct {
	pos   position
	uses  []int32
	arena []T
	opt   optim.State
	zero  *keptShards[T] // ZeRO-1: the shards' versions (survive_zero.go)
}

// survive takes this rank from its failed group to the next generation's
// (steps 1-5 above); on return l.w and l.pos are the new generation's.
func (l *rankLoop[T]) survive(cause error) error {
	began := time.Now()
	old := l.w
	st, kept, err := keepState(old) // no communication (survive_zero.go)
	if err != nil {
		return fmt.Errorf("trainer: keeping the optimizer state over a failure: %w", err)
	}
	snap := snapshot[T]{pos: l.pos, uses: append([]int32(nil), l.uses.count...),
		arena: append([]T(nil), old.d.ParamArena()...), opt: st.Clone(), zero: kept}
	l.unwatch()
	l.unwatch = func() {}
	_ = old.g.Close()
	old.close()
	for {
		conn, gen, err := l.cfg.Survive.Rejoin(l.ctx, cause)
		if err != nil {
			return fmt.Errorf("trainer: after %v: %w", cause, err)
		}
		g, err := allreduce.NewGroup(conn, l.cfg.GroupOptions...)
		if err != nil {
			_ = conn.Close()
			return fmt.Errorf("trainer: generation %d: %w", gen.Number, err)
		}
		l.unwatch = l.cfg.Survive.Watch(g.Abort)
		w, err := l.rebuild(g, gen, &snap, began)
		if err == nil {
			l.w, l.pos = w, snap.pos
			l.uses.count = snap.uses
			l.uses.recount()
			l.res.Generations = append(l.res.Generations, gen)
			if g.Rank() == 0 && l.cfg.OnSurvive != nil {
				l.cfg.OnSurvive(gen, snap.pos.global, reshardSentOf(w))
			}
			l.env.rec.BeginAt(trace.Comm, "elastic", "survive a failure", began).
				Int("generation", int64(gen.Number)).Int("ranks", int64(gen.Size)).
				Str("lost", joinInts(gen.Lost)).Int("global_step", snap.pos.global).End()
			return nil
		}
		if g.Err() == nil {
			_ = g.Close()
			return err
		}
		cause = err
		l.unwatch()
		l.unwatch = func() {}
		_ = g.Close()
	}
}

// rebuild builds this rank's worker on g and agrees with the other
// members on the state (step 3 and 4): snap is replaced by the source's
// only once all of it has arrived.
func (l *rankLoop[T]) rebuild(g *allreduce.Group, gen rendezvous.Generation, snap *snapshot[T], began time.Time) (*worker[T], error) {
	w, err := newWorker[T](l.ctx, l.cfg, g, l.train, l.test, l.env)
	if err != nil {
		return nil, err
	}
	got, err := l.agree(w, *snap, gen, began) // agreeState (survive_zero.go), or a heal (survive_heal.go)
	if err != nil {
		w.close()
		return nil, err
	}
	*snap = got
	return w, nil
}

// load puts s's parameters and optimizer state into w.
func (w *worker[T]) load(s snapshot[T]) error {
	copy(w.d.ParamArena(), s.arena)
	if err := w.rep.LoadFullOptimizerState(s.opt); err != nil {
		return fmt.Errorf("trainer: loading the optimizer state after a failure: %w", err)
	}
	return nil
}

// syncState agrees on the state over w's group: the source (step 4
// above) broadcasts its own, which every member returns.
func syncState[T Float](w *worker[T], mine snapshot[T]) (snapshot[T], error) {
	ctx, g := w.comm, w.g
	p := mine.pos
	all := make([]int64, 3*g.Size())
	if err := allreduce.AllGather(ctx, g, all, []int64{p.global, int64(p.epoch), int64(p.step)}); err != nil {
		return mine, err
	}
	src := pickSource(all)
	names := make([]string, len(mine.opt.Buffers))
	for i, b := range mine.opt.Buffers {
		names[i] = b.Name
	}
	nameBytes := []byte(strings.Join(names, "\n"))
	hdr := []int64{int64(p.epoch), int64(p.step), p.global, int64(p.lossSteps), int64(math.Float64bits(p.lossSum)),
		mine.opt.Step, int64(mine.opt.Len), int64(len(names)), int64(len(nameBytes))}
	if err := allreduce.Broadcast(ctx, g, hdr, src); err != nil {
		return mine, err
	}
	if g.Rank() == src {
		return mine, sendState(w, mine, nameBytes, src)
	}
	return recvState(w, mine, hdr, src)
}

// pickSource is the member whose state every member takes, given each
// member's (global step, epoch, step in epoch) in rank order: the most
// optimizer steps done, then the earliest position (an epoch end redone,
// not skipped), then the lowest rank.
func pickSource(all []int64) int {
	src := 0
	for r := 1; 3*r+3 <= len(all); r++ {
		a, b := all[3*r:3*r+3], all[3*src:3*src+3]
		if a[0] > b[0] || a[0] == b[0] && (a[1] < b[1] || a[1] == b[1] && a[2] < b[2]) {
			src = r
		}
	}
	return src
}

func sendState[T Float](w *worker[T], s snapshot[T], nameBytes []byte, src int) error {
	ctx, g := w.comm, w.g
	nb := make([]int64, len(nameBytes))
	for i, c := range nameBytes {
		nb[i] = int64(c)
	}
	if err := allreduce.Broadcast(ctx, g, nb, src); err != nil {
		return err
	}
	if err := allreduce.Broadcast(ctx, g, s.uses, src); err != nil {
		return err
	}
	if err := allreduce.Broadcast(ctx, g, s.arena, src); err != nil {
		return err
	}
	for _, b := range s.opt.Buffers {
		if err := allreduce.Broadcast(ctx, g, b.Data, src); err != nil {
			return err
		}
	}
	return nil
}

// recvState receives the source's state, laid out as hdr says, into a new
// snapshot: mine is untouched.
func recvState[T Float](w *worker[T], mine snapshot[T], hdr []int64, src int) (snapshot[T], error) {
	ctx, g := w.comm, w.g
	const maxBuffers, maxNames = 16, 4096
	optLen, nbuf, nnames := hdr[6], hdr[7], hdr[8]
	if optLen < 0 || optLen > int64(len(mine.arena)) || nbuf < 0 || nbuf > maxBuffers || nnames < 0 || nnames > maxNames {
		return mine, fmt.Errorf("trainer: the source's state header is out of range (%d elements, %d buffers, %d bytes of names)", optLen, nbuf, nnames)
	}
	nb := make([]int64, nnames)
	if err := allreduce.Broadcast(ctx, g, nb, src); err != nil {
		return mine, err
	}
	name := make([]byte, len(nb))
	for i, c := range nb {
		name[i] = byte(c)
	}
	got := snapshot[T]{
		pos:  position{epoch: int(hdr[0]), step: int(hdr[1]), global: hdr[2], lossSteps: int(hdr[3]), lossSum: math.Float64frombits(uint64(hdr[4]))},
		uses: make([]int32, len(mine.uses)), arena: make([]T, len(mine.arena)), opt: mine.opt.Clone(),
	}
	if err := allreduce.Broadcast(ctx, g, got.uses, src); err != nil {
		return mine, err
	}
	if err := allreduce.Broadcast(ctx, g, got.arena, src); err != nil {
		return mine, err
	}
	got.opt.Step, got.opt.Len, got.opt.Buffers = hdr[5], int(optLen), nil
	var names []string
	if nbuf > 0 {
		names = strings.Split(string(name), "\n")
	}
	if len(names) != int(nbuf) {
		return mine, errors.New("trainer: the source's optimizer buffer names do not match their count")
	}
	for _, n := range names {
		b := optim.Buffer{Name: n, Data: make([]float64, optLen)}
		if err := allreduce.Broadcast(ctx, g, b.Data, src); err != nil {
			return mine, err
		}
		got.opt.Buffers = append(got.opt.Buffers, b)
	}
	return got, nil
}
