package zero

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// gatherBucket assembles bucket bi of a per-element quantity held shard
// by shard (an optimizer buffer, the parameters) on every rank into full:
// own is this rank's shard of it in the old world, left its copy of the
// left's (read only when the left was lost), both in shard order; contrib
// is scratch.
//
// Steps: every old rank's chunk of the bucket comes from its holder (the
// rank, or its buddy when it was lost: heal.go's holder); each new rank
// contributes the chunks it holds, in chunk order, to one AllGatherV.
// Where the contributions, in new-rank order, are the chunks in order
// (no rank lost, or with offset 1 every lost rank's chunk just before its
// buddy's, none the last) the AllGatherV writes full directly; else it
// writes scratch, and each chunk is copied to its place.
func gatherBucket[T ddp.Float, E allreduce.Numeric](ctx context.Context, p *reshard[T], bi int, own, left, full, contrib []E) ([]E, error) {
	bl := len(full)
	chunk := func(j int) (lo, hi int) { return allreduce.ChunkBounds(bl, p.n, j) }
	held := p.heldChunks() // by new rank: the old chunks it contributes, in order
	counts := make([]int, len(held))
	var order []int // every old chunk, in contribution order
	for i, cs := range held {
		for _, c := range cs {
			lo, hi := chunk(c)
			counts[i] += hi - lo
		}
		order = append(order, cs...)
	}
	contrib = contrib[:0]
	if p.from != nil {
		for _, c := range held[p.to.group.Rank()] {
			if c == p.old {
				op := p.from.pieces[bi]
				contrib = append(contrib, own[op.Off:op.Off+op.Len()]...)
			} else {
				lp := p.from.buddy.leftPieces[bi]
				contrib = append(contrib, left[lp.Off:lp.Off+lp.Len()]...)
			}
		}
	}
	if slices.IsSorted(order) {
		return contrib, allreduce.AllGatherV(ctx, p.to.group, full, contrib, counts)
	}
	mine := len(contrib)
	contrib = slices.Grow(contrib, bl)[:mine+bl]
	gathered := contrib[mine:]
	if err := allreduce.AllGatherV(ctx, p.to.group, gathered, contrib[:mine], counts); err != nil {
		return contrib[:mine], err
	}
	at := 0
	for _, c := range order {
		lo, hi := chunk(c)
		at += copy(full[lo:hi], gathered[at:at+hi-lo])
	}
	return contrib[:mine], nil
}

// heldChunks is, by new rank, the old ranks whose chunks of a bucket it
// holds: its own (old rank) and its left's when the left was lost, in
// chunk order; none on a joiner.
func (p *reshard[T]) heldChunks() [][]int {
	held := make([][]int, len(p.oldOf))
	for i, s := range p.oldOf {
		if s < 0 {
			continue
		}
		held[i] = append(held[i], s)
		if l := (s + p.n - p.off) % p.n; l != s && p.lost[l] {
			held[i] = append(held[i], l)
			slices.Sort(held[i])
		}
	}
	return held
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

// loadFull loads the left shard's part of full into the copy, and the own
// shard's, own, into self (see LoadFullOptimizerState). Nil-safe.
func (b *buddy[T]) loadFull(full, own optim.State) error {
	if b == nil {
		return nil
	}
	b.primed = false
	if err := b.self.LoadState(own); err != nil {
		return fmt.Errorf("zero: loading the shard's second version: %w", err)
	}
	if err := b.shadow.LoadState(cutShard(full, b.leftPieces, len(b.params))); err != nil {
		return fmt.Errorf("zero: loading the buddy copy of rank %d's shard: %w", b.left, err)
	}
	return nil
}

// maxHeaderWords bounds the state header a joiner accepts (64 KiB).
const maxHeaderWords = 8 << 10

// shareHeader gives every rank the optimizer state's header (name, type,
// step, hyper-parameters, buffer names) of the first old rank that stays:
// a joiner has none. A joiner checks it against its own optimizer.
func (p *reshard[T]) shareHeader(ctx context.Context) error {
	root := -1
	for _, i := range p.newOf {
		if i >= 0 {
			root = i
			break
		}
	}
	var words []int64
	if p.from != nil {
		h := p.own
		h.Buffers = make([]optim.Buffer, len(p.own.Buffers))
		for k, b := range p.own.Buffers {
			h.Buffers[k] = optim.Buffer{Name: b.Name}
		}
		h.Len = 0
		enc, err := json.Marshal(headerOf(h))
		if err != nil {
			return fmt.Errorf("zero: encoding the optimizer state's header: %w", err)
		}
		words = make([]int64, 1+(len(enc)+7)/8)
		words[0] = int64(len(enc))
		for i, c := range enc {
			words[1+i/8] |= int64(c) << (8 * (i % 8))
		}
	}
	size := []int64{int64(len(words))}
	if err := allreduce.Broadcast(ctx, p.to.group, size, root); err != nil {
		return fmt.Errorf("zero: sharing the optimizer state's header: %w", err)
	}
	if size[0] < 1 || size[0] > maxHeaderWords {
		return fmt.Errorf("zero: the optimizer state's header from rank %d is %d words (limit %d)", root, size[0], maxHeaderWords)
	}
	if p.from == nil {
		words = make([]int64, size[0])
	}
	if err := allreduce.Broadcast(ctx, p.to.group, words, root); err != nil {
		return fmt.Errorf("zero: sharing the optimizer state's header: %w", err)
	}
	if p.from != nil {
		return nil
	}
	n := words[0]
	if n < 0 || n > 8*(size[0]-1) {
		return fmt.Errorf("zero: the optimizer state's header from rank %d claims %d bytes in %d words", root, n, size[0]-1)
	}
	enc := make([]byte, n)
	for i := range enc {
		enc[i] = byte(words[1+i/8] >> (8 * (i % 8)))
	}
	var h stateHeader
	if err := json.Unmarshal(enc, &h); err != nil {
		return fmt.Errorf("zero: the optimizer state's header from rank %d does not parse: %w", root, err)
	}
	st, err := h.state()
	if err == nil && st.Optimizer != p.to.opt.Name() {
		err = fmt.Errorf("the state is %s's, this rank's optimizer is %s", st.Optimizer, p.to.opt.Name())
	}
	if err != nil {
		return fmt.Errorf("zero: the optimizer state's header from rank %d: %w", root, err)
	}
	p.own = st
	return nil
}

// stateHeader is an optim.State without its data, hyper-parameters as
// their bits (JSON has no NaN).
type stateHeader struct {
	Optimizer, DType string
	Step             int64
	Hyper            []string
	Bits             []uint64
	Buffers          []string
}

func headerOf(s optim.State) stateHeader {
	h := stateHeader{Optimizer: s.Optimizer, DType: s.DType, Step: s.Step}
	for _, x := range s.Hyper {
		h.Hyper = append(h.Hyper, x.Name)
		h.Bits = append(h.Bits, math.Float64bits(x.Value))
	}
	for _, b := range s.Buffers {
		h.Buffers = append(h.Buffers, b.Name)
	}
	return h
}

// state is the header as a State with empty buffers, bounded and checked.
func (h stateHeader) state() (optim.State, error) {
	if len(h.Hyper) != len(h.Bits) || len(h.Hyper) > 64 || len(h.Buffers) > 16 {
		return optim.State{}, fmt.Errorf("%d hyper-parameters with %d values and %d buffers (limits 64, 16)", len(h.Hyper), len(h.Bits), len(h.Buffers))
	}
	s := optim.State{Optimizer: h.Optimizer, DType: h.DType, Step: h.Step}
	for i, name := range h.Hyper {
		s.Hyper = append(s.Hyper, optim.Hyper{Name: name, Value: math.Float64frombits(h.Bits[i])})
	}
	for _, name := range h.Buffers {
		s.Buffers = append(s.Buffers, optim.Buffer{Name: name})
	}
	if h.Step == 0 {
		s.Buffers = nil
	}
	return s, s.Validate()
}
