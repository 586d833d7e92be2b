package zero

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/optim"
)

// Running a re-shard's plan (reshard_plan.go) on one rank. Steps:
//
//  1. the optimizer state's header (shareHeader) from the first old rank
//     that stays: a joiner has none;
//  2. one AllGather of whether each rank's old copy of its left's shard is
//     at the header's step (copyOK: a holder of its left's segments);
//  3. the plan, the same on every rank;
//  4. the local moves: copies in memory from this rank's old state;
//  5. round by round, one Split into the round's pairs, and in each pair
//     one Broadcast per direction that has moves: the sender packs its
//     moves' segments, every state buffer in turn, into one message, and
//     the receiver unpacks them into its new state;
//  6. one AllGather of the bytes each rank sent in step 5, as it counted
//     them while sending (Moved): checked against the plan's count;
//  7. the new state loaded into to's optimizer (and, with buddies, into
//     self, and the copy into the shadow).
//
// A moved segment is checked end to end by CheckShards (heal.go).

// Moved is what the last re-shard into a wrapper sent: the optimizer
// state's bytes, by rank of the new world, as each rank counted what it
// sent and all gathered (the same on every rank).
type Moved struct {
	Sent []int64
}

// Bytes is the optimizer state's bytes the re-shard sent, over all ranks.
func (m Moved) Bytes() int64 {
	var b int64
	for _, s := range m.Sent {
		b += s
	}
	return b
}

// LastReshard is what the last Regroup, Reshard, Recover or RecoverJoin
// into z sent (zero before any).
func (z *ZeRO1[T]) LastReshard() Moved {
	return Moved{Sent: append([]int64(nil), z.reshard.Sent...)}
}

// move moves the state (steps 1-7) and loads it into to.
func (p *reshard[T]) move(ctx context.Context) error {
	if err := p.shareHeader(ctx); err != nil {
		return err
	}
	to := p.to
	own, left := p.newStates()
	nbuf := len(own.Buffers)
	p.to.reshard = Moved{Sent: make([]int64, to.group.Size())}
	if nbuf > 0 {
		copyOK, err := p.shareCopies(ctx)
		if err != nil {
			return err
		}
		plan, err := planMoves(to.buckets, p.n, p.oldOf, copyOK, p.off, to.BuddyOffset())
		if err != nil {
			return err
		}
		for _, mv := range plan.local {
			if mv.to != to.group.Rank() {
				continue
			}
			for k := range nbuf {
				copy(p.dst(own, left, mv, k), p.src(mv, k))
			}
		}
		mine, err := p.exchange(ctx, plan, own, left)
		if err != nil {
			return err
		}
		if err := p.shareSent(ctx, plan, mine, nbuf); err != nil {
			return err
		}
	}
	return p.load(own, left)
}

// shareSent is step 6: every rank's count of the bytes it sent (mine is
// this rank's) into p.to.reshard; a count that is not the plan's is an
// error (the ranks ran different plans).
func (p *reshard[T]) shareSent(ctx context.Context, plan movePlan, mine int64, nbuf int) error {
	sent := p.to.reshard.Sent
	if err := allreduce.AllGather(ctx, p.to.group, sent, []int64{mine}); err != nil {
		return fmt.Errorf("zero: sharing the bytes each rank sent in the re-shard: %w", err)
	}
	for r, e := range plan.sent {
		if want := int64(8 * nbuf * e); sent[r] != want {
			return fmt.Errorf("zero: rank %d sent %d bytes of optimizer state in the re-shard, where the plan has it send %d", r, sent[r], want)
		}
	}
	return nil
}

// newStates are the new own state and copy, the header's, with buffers
// sized to to's shard and its left's (step 1's header in p.own).
func (p *reshard[T]) newStates() (own, left optim.State) {
	to := p.to
	own = p.own
	own.Hyper = append([]optim.Hyper(nil), p.own.Hyper...)
	own.Buffers = make([]optim.Buffer, len(p.own.Buffers))
	if to.buddy != nil {
		left = own
		left.Hyper = append([]optim.Hyper(nil), p.own.Hyper...)
		left.Buffers = make([]optim.Buffer, len(p.own.Buffers))
	}
	for k, b := range p.own.Buffers {
		own.Buffers[k] = optim.Buffer{Name: b.Name, Data: make([]float64, to.shard)}
		if to.buddy != nil {
			left.Buffers[k] = optim.Buffer{Name: b.Name, Data: make([]float64, len(to.buddy.params))}
		}
	}
	if own.Step > 0 {
		own.Len, left.Len = to.shard, 0
		if to.buddy != nil {
			left.Len = len(to.buddy.params)
		}
	}
	return own, left
}

// load is step 7.
func (p *reshard[T]) load(own, left optim.State) error {
	to := p.to
	if err := to.opt.LoadState(own); err != nil {
		return fmt.Errorf("zero: loading the re-sharded state: %w", err)
	}
	if to.buddy != nil {
		if err := to.buddy.self.LoadState(own); err != nil {
			return fmt.Errorf("zero: loading the re-sharded state's second version: %w", err)
		}
		if err := to.buddy.shadow.LoadState(left); err != nil {
			return fmt.Errorf("zero: loading the re-sharded buddy copy: %w", err)
		}
		to.buddy.primed = false
	}
	return nil
}

// shareCopies is step 2: by old rank, whether its copy of its left's
// shard is at the state's step (p.own.Step, the header's).
func (p *reshard[T]) shareCopies(ctx context.Context) ([]bool, error) {
	m := p.to.group.Size()
	mine := []int64{0}
	if p.from != nil && p.from.buddy != nil && p.left.Step == p.own.Step && len(p.left.Buffers) == len(p.own.Buffers) {
		mine[0] = 1
	}
	all := make([]int64, m)
	if err := allreduce.AllGather(ctx, p.to.group, all, mine); err != nil {
		return nil, fmt.Errorf("zero: sharing which buddy copies are current: %w", err)
	}
	copyOK := make([]bool, p.n)
	for w, o := range p.oldOf {
		if o >= 0 {
			copyOK[o] = all[w] == 1
		}
	}
	return copyOK, nil
}

// src is segment mv.seg of state buffer k in this rank's old state: its
// own shard's or its copy's.
func (p *reshard[T]) src(mv move, k int) []float64 {
	if mv.fromCopy {
		return segmentOf(p.left.Buffers[k].Data, p.from.buddy.leftPieces, mv.seg)
	}
	return segmentOf(p.own.Buffers[k].Data, p.from.pieces, mv.seg)
}

// dst is segment mv.seg of state buffer k in this rank's new state: own
// or its copy, left.
func (p *reshard[T]) dst(own, left optim.State, mv move, k int) []float64 {
	if mv.toCopy {
		return segmentOf(left.Buffers[k].Data, p.to.buddy.leftPieces, mv.seg)
	}
	return segmentOf(own.Buffers[k].Data, p.to.pieces, mv.seg)
}

// segmentOf is segment s of data, a state buffer laid out as pieces.
func segmentOf(data []float64, pieces []Piece, s segment) []float64 {
	pc := pieces[s.bucket]
	return data[pc.Off+s.lo-pc.Lo : pc.Off+s.hi-pc.Lo]
}

// exchange is step 5; it returns the bytes this rank sent.
func (p *reshard[T]) exchange(ctx context.Context, plan movePlan, own, left optim.State) (int64, error) {
	g, me := p.to.group, p.to.group.Rank()
	var scratch []float64
	var sent int64
	for c, round := range plan.rounds {
		colour, partner := -1, -1
		for i, pr := range round {
			if pr[0] == me || pr[1] == me {
				colour, partner = i, pr[0]+pr[1]-me
			}
		}
		pair, err := g.Split(ctx, colour, me)
		if err != nil {
			return sent, fmt.Errorf("zero: making the re-shard's pair groups (round %d): %w", c, err)
		}
		if pair == nil {
			continue
		}
		lo, hi := min(me, partner), max(me, partner)
		for root, dir := range [2][2]int{{lo, hi}, {hi, lo}} {
			if scratch, err = p.pairMove(ctx, pair, root, dir, plan.moves, own, left, scratch); err != nil {
				break
			}
			if dir[0] == me {
				sent += int64(8 * len(scratch))
			}
		}
		_ = pair.Close()
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// pairMove sends the moves from dir[0] to dir[1] in pair, where dir[0] is
// rank root: one message, every state buffer's segments in turn, which
// it returns (in scratch's memory; empty when there are no such moves).
func (p *reshard[T]) pairMove(ctx context.Context, pair *allreduce.Group, root int, dir [2]int, moves []move, own, left optim.State, scratch []float64) ([]float64, error) {
	var mine []move
	size := 0
	for _, mv := range moves {
		if mv.from == dir[0] && mv.to == dir[1] {
			mine = append(mine, mv)
			size += mv.seg.hi - mv.seg.lo
		}
	}
	if size == 0 {
		return scratch[:0], nil // nothing sent: exchange counts len
	}
	nbuf := len(own.Buffers)
	if cap(scratch) < size*nbuf {
		scratch = make([]float64, size*nbuf)
	}
	scratch = scratch[:size*nbuf]
	sending := p.to.group.Rank() == dir[0]
	if sending {
		off := 0
		for k := range nbuf {
			for _, mv := range mine {
				off += copy(scratch[off:], p.src(mv, k))
			}
		}
	}
	if err := allreduce.Broadcast(ctx, pair, scratch, root); err != nil {
		return scratch, fmt.Errorf("zero: moving %d elements of optimizer state from rank %d to rank %d: %w", size*nbuf, dir[0], dir[1], err)
	}
	if !sending {
		off := 0
		for k := range nbuf {
			for _, mv := range mine {
				off += copy(p.dst(own, left, mv, k), scratch[off:])
			}
		}
	}
	return scratch, nil
}
