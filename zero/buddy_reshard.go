package zero

import (
	"context"
	"fmt"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Re-sharding after a loss. The old world of N ranks loses the ranks in
// lost; the survivors, numbered 0..N'-1 in their old order, form a new group
// and a new wrapper over it. Every element of the optimizer state moves from
// the rank that holds it (its old owner, or for a lost owner the owner's
// buddy) to its owner in the new layout (Pieces over N' ranks).
//
// Steps, for each bucket of the (unchanged) arena and each state buffer:
//
//  1. every survivor s contributes its old piece of the bucket, preceded by
//     its left's piece when the left (s-1) was lost: since no lost rank's
//     buddy is lost, the contributions tile the bucket in rank order,
//     except the last piece when rank N-1 was lost (its buddy is rank 0);
//  2. an AllGatherV over the survivors assembles the bucket's state on
//     every survivor, and a Broadcast from rank 0 adds rank N-1's piece
//     when it was lost;
//  3. each survivor keeps its new piece, and its new left's piece for its
//     new buddy copy.
//
// Bytes: every survivor receives the whole state once ((N'-1)/N' of it over
// the wire per rank, as FullOptimizerState), with one bucket of scratch per
// buffer at a time. The state each survivor then holds is bitwise what a
// run without the loss holds for the same elements: nothing is recomputed.

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
	p, err := planReshard(from, to, lost)
	if err == nil {
		err = p.run(ctx)
	}
	if err != nil {
		to.group.Abort(err)
	}
	return err
}

// reshard is one survivor's plan.
type reshard[T ddp.Float] struct {
	from, to  *ZeRO1[T]
	n         int    // the old world's size
	old       int    // this rank in the old world
	lost      []bool // by old rank
	own, left optim.State
}

func planReshard[T ddp.Float](from, to *ZeRO1[T], lost []int) (*reshard[T], error) {
	n, old := from.group.Size(), from.group.Rank()
	p := &reshard[T]{from: from, to: to, n: n, old: old, lost: make([]bool, n)}
	for _, k := range lost {
		if k < 0 || k >= n || p.lost[k] {
			return nil, fmt.Errorf("zero: lost ranks %v: want distinct ranks of the old world of %d", lost, n)
		}
		p.lost[k] = true
	}
	if p.lost[old] {
		return nil, fmt.Errorf("zero: rank %d is in the lost ranks %v, yet it re-shards", old, lost)
	}
	sorted := slices.Sorted(slices.Values(lost))
	for _, k := range sorted {
		if from.buddy == nil {
			return nil, fmt.Errorf("zero: rank %d's optimizer shard is lost: the run has no buddy copies (WrapWithBuddy); resume from the checkpoint", k)
		}
		if b := (k + 1) % n; p.lost[b] {
			return nil, fmt.Errorf("zero: rank %d's optimizer shard is gone: its buddy, rank %d, which held the only copy, was lost too; resume from the checkpoint", k, b)
		}
	}
	below := 0
	for _, k := range sorted {
		if k < old {
			below++
		}
	}
	switch {
	case to.group.Size() != n-len(lost):
		return nil, fmt.Errorf("zero: the survivors' group has %d ranks, want %d (%d less %d lost)", to.group.Size(), n-len(lost), n, len(lost))
	case to.group.Rank() != old-below:
		return nil, fmt.Errorf("zero: old rank %d is rank %d of the survivors' group, want %d (survivors numbered in their old order)", old, to.group.Rank(), old-below)
	case to.total != from.total || !slices.Equal(to.buckets, from.buckets):
		return nil, fmt.Errorf("zero: the new wrapper's arena (%d elements, %d buckets) is not the old one's (%d, %d): the same model and bucket sizes are needed", to.total, len(to.buckets), from.total, len(from.buckets))
	}
	p.own = from.opt.State()
	if from.buddy != nil {
		p.left = from.buddy.shadow.State()
		if p.left.Step != p.own.Step || len(p.left.Buffers) != len(p.own.Buffers) {
			return nil, fmt.Errorf("zero: the buddy copy (step %d, %d buffers) does not match the shard's state (step %d, %d buffers)", p.left.Step, len(p.left.Buffers), p.own.Step, len(p.own.Buffers))
		}
	}
	return p, nil
}

// run moves the state (steps 1-3) and loads it into to.
func (p *reshard[T]) run(ctx context.Context) error {
	to := p.to
	own := p.own
	own.Hyper = append([]optim.Hyper(nil), p.own.Hyper...)
	own.Buffers = make([]optim.Buffer, len(p.own.Buffers))
	var left optim.State
	if to.buddy != nil {
		left = own
		left.Hyper = append([]optim.Hyper(nil), p.own.Hyper...)
		left.Buffers = make([]optim.Buffer, len(p.own.Buffers))
	}
	scratch := make([]float64, p.maxBucket())
	var contrib []float64
	for k, b := range p.own.Buffers {
		own.Buffers[k] = optim.Buffer{Name: b.Name, Data: make([]float64, to.shard)}
		if to.buddy != nil {
			left.Buffers[k] = optim.Buffer{Name: b.Name, Data: make([]float64, len(to.buddy.params))}
		}
		for bi, r := range to.buckets {
			full := scratch[:r[1]-r[0]]
			var err error
			if contrib, err = p.gather(ctx, bi, k, full, contrib); err != nil {
				return fmt.Errorf("zero: re-sharding optimizer buffer %q: %w", b.Name, err)
			}
			np := to.pieces[bi]
			copy(own.Buffers[k].Data[np.Off:np.Off+np.Len()], full[np.Lo-r[0]:np.Hi-r[0]])
			if to.buddy != nil {
				lp := to.buddy.leftPieces[bi]
				copy(left.Buffers[k].Data[lp.Off:lp.Off+lp.Len()], full[lp.Lo-r[0]:lp.Hi-r[0]])
			}
		}
	}
	if own.Step > 0 {
		own.Len, left.Len = to.shard, 0
		if to.buddy != nil {
			left.Len = len(to.buddy.params)
		}
	}
	if err := to.opt.LoadState(own); err != nil {
		return fmt.Errorf("zero: loading the re-sharded state: %w", err)
	}
	if to.buddy != nil {
		if err := to.buddy.shadow.LoadState(left); err != nil {
			return fmt.Errorf("zero: loading the re-sharded buddy copy: %w", err)
		}
	}
	return nil
}

// gather assembles state buffer k of bucket bi on every survivor (steps 1
// and 2) into full, with contrib as scratch for this rank's contribution.
func (p *reshard[T]) gather(ctx context.Context, bi, k int, full, contrib []float64) ([]float64, error) {
	bl := len(full)
	chunk := func(j int) (lo, hi int) { return allreduce.ChunkBounds(bl, p.n, j) }
	ownPiece := p.from.pieces[bi]
	ownData := p.own.Buffers[k].Data[ownPiece.Off : ownPiece.Off+ownPiece.Len()]
	var leftData []float64
	if p.from.buddy != nil {
		lp := p.from.buddy.leftPieces[bi]
		leftData = p.left.Buffers[k].Data[lp.Off : lp.Off+lp.Len()]
	}
	counts := make([]int, 0, p.to.group.Size())
	for s := range p.n {
		if p.lost[s] {
			continue
		}
		lo, hi := chunk(s)
		if s > 0 && p.lost[s-1] {
			lo, _ = chunk(s - 1)
		}
		counts = append(counts, hi-lo)
	}
	contrib = append(contrib[:0], ownData...)
	if p.old > 0 && p.lost[p.old-1] {
		contrib = append(append(contrib[:0], leftData...), ownData...)
	}
	end := bl
	if p.lost[p.n-1] {
		end, _ = chunk(p.n - 1)
	}
	if err := allreduce.AllGatherV(ctx, p.to.group, full[:end], contrib, counts); err != nil {
		return contrib, err
	}
	if p.lost[p.n-1] {
		if p.old == 0 {
			copy(full[end:], leftData)
		}
		if err := allreduce.Broadcast(ctx, p.to.group, full[end:], 0); err != nil {
			return contrib, err
		}
	}
	return contrib, nil
}

// maxBucket is the longest bucket's length.
func (p *reshard[T]) maxBucket() int {
	m := 0
	for _, r := range p.to.buckets {
		m = max(m, r[1]-r[0])
	}
	return m
}

// cutShard is the state of the shard made of pieces (size elements) cut
// out of full, the state of the whole arena.
func cutShard(full optim.State, pieces []Piece, size int) optim.State {
	shard := full
	if full.Len == 0 {
		return shard
	}
	shard.Len = size
	shard.Hyper = append([]optim.Hyper(nil), full.Hyper...)
	shard.Buffers = make([]optim.Buffer, len(full.Buffers))
	for k, b := range full.Buffers {
		data := make([]float64, 0, size)
		for _, p := range pieces {
			data = append(data, b.Data[p.Lo:p.Hi]...)
		}
		shard.Buffers[k] = optim.Buffer{Name: b.Name, Data: data}
	}
	return shard
}

// loadFull loads the left shard's part of full into the copy (see
// LoadFullOptimizerState). Nil-safe.
func (b *buddy[T]) loadFull(full optim.State) error {
	if b == nil {
		return nil
	}
	if err := b.shadow.LoadState(cutShard(full, b.leftPieces, len(b.params))); err != nil {
		return fmt.Errorf("zero: loading the buddy copy of rank %d's shard: %w", b.left, err)
	}
	return nil
}
