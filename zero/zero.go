// Package zero is ZeRO stage 1 for ringddp: optimizer state sharded over
// ranks.
//
// Vocabulary (N ranks, M gradient bytes per step, buckets as ddp cuts them):
//   - piece: rank r's piece of bucket b is chunk r of the bucket, the
//     element range allreduce.ChunkBounds(len(b), N, r) of it: exactly
//     where a ring reduce-scatter of the bucket leaves rank r's result.
//   - shard: rank r's pieces of every bucket, in bucket order. The shard's
//     optimizer state is over the concatenation of the pieces (shard order);
//     its length is within one element per bucket of 1/N of the arena.
//
// Every bucket is split evenly over all ranks, rather than the arena being
// cut into N contiguous shards, because that is what makes every bucket's
// collective cheap: with contiguous shards a bucket that lies inside one
// rank's shard is reduce-scattered around the ring with every other chunk
// empty, N-1 sequential hops of the whole bucket ((N-1)·M_b bytes through
// each link in turn), and a bucket that spans k shards costs N-1 hops of its
// largest piece; a tree Reduce to the owner still costs ⌈log2 N⌉·M_b per
// bucket. The even split costs (N-1)/N·M_b per rank for every bucket, all
// links busy at once: the minimum for a reduce-scatter, and the same chunks
// and reduction order as DDP's ring all-reduce of the bucket, so ZeRO-1 is
// bitwise identical to DDP over allreduce.Ring.
//
// A step is the DDP step with two collectives in place of the all-reduce:
//
//  1. backward: each gradient bucket, as soon as it is complete, is
//     reduce-scattered (Avg) into the shard's gradient (GradShard), in
//     shard order — overlapping the rest of the backward pass as in DDP.
//     Rank r sends (M_b - |piece r|)·size bytes, (N-1)/N of the bucket.
//  2. the optimizer updates rank r's shard only, with state for that shard
//     only: 1/N of DDP's optimizer memory. The optimizer needs flat slices:
//     the shard's parameters are moved to the front of the parameter arena
//     for the update and back after it (two memmoves of 1/N of the arena).
//     GradShard is flat already; it costs 1/N of the gradient arena's
//     memory, and saves two more memmoves.
//  3. all-gather of each bucket's updated pieces, in place, straight into
//     every rank's arena: rank r sends (M_b - |piece r+1|)·size bytes.
//
// Bytes sent per step, summed over ranks: (N-1)·M for the reduce-scatters
// and (N-1)·M for the all-gathers, the same 2(N-1)·M as DDP's ring
// all-reduce.
//
// With buddies (WrapWithBuddy, buddy.go) each rank also keeps a copy of its
// ring neighbour's shard state, so that the state survives a lost rank:
// after each bucket's reduce-scatter, rank r's piece goes on to rank r+1,
// one more hop (M/N more bytes per rank and step in all);
// Reshard and Regroup (buddy_reshard.go) move the state to the world that
// follows a loss or a join.
package zero

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Piece is one bucket's share of a rank's shard: the arena elements
// [Lo, Hi), held at offset Off of the shard (and of its optimizer state).
type Piece struct {
	Lo, Hi int // element range in the parameter and gradient arenas
	Off    int // offset in the shard
}

// Len is the number of elements in the piece.
func (p Piece) Len() int { return p.Hi - p.Lo }

// ZeRO1 is one rank's ZeRO-1 wrapper: a ddp.DDP whose buckets are
// reduce-scattered, and an optimizer over this rank's shard.
type ZeRO1[T ddp.Float] struct {
	d       *ddp.DDP[T]
	opt     optim.Optimizer[T]
	group   *allreduce.Group
	buckets [][2]int // the arena's buckets, in order, tiling [0, total)
	pieces  []Piece  // this rank's piece of each bucket
	total   int      // elements in the arena
	shard   int      // elements in this rank's shard
	// gradShard is the shard's averaged gradient, in shard order (on one
	// rank, the gradient arena itself).
	gradShard []T
	lastOp    time.Duration
	buddy     *buddy[T] // the copy of the left rank's shard (WrapWithBuddy), or nil
	reshard   Moved     // what the last re-shard into this wrapper sent (reshard_move.go)
	// ranged is opt as a ranged optimizer when the shard is updated in
	// backward (ddp.WithOptimizerInBackward given to Wrap); nil otherwise.
	ranged optim.Ranged[T]
}

// Wrap wraps params like ddp.Wrap (same options) and makes opt the
// optimizer of this rank's shard. opt must be fresh (its state is sized to
// the shard at the first step).
func Wrap[T ddp.Float](ctx context.Context, group *allreduce.Group, params G.Nodes, opt optim.Optimizer[T], opts ...ddp.Option) (*ZeRO1[T], error) {
	if opt == nil {
		return nil, fmt.Errorf("zero: nil optimizer")
	}
	z := &ZeRO1[T]{opt: opt, group: group}
	if ib := ddp.OptimizerInBackward(opts...); ib != nil {
		r, ok := opt.(optim.Ranged[T])
		if t := reflect.TypeOf(ib); !ok || t != reflect.TypeOf(opt) || t.Comparable() && ib != any(opt) {
			return nil, fmt.Errorf("zero: the optimizer in backward (%T) must be the shard's optimizer (%T), one that updates range by range", ib, opt)
		}
		z.ranged = r
		opts = append(opts, ddp.WithBucketStepper(shardStepper[T]{z}))
	}
	opts = append(opts, ddp.WithBucketCollective[T](z.reduceScatterBucket), ddp.WithCollectiveName("reduce-scatter"))
	d, err := ddp.Wrap[T](ctx, group, params, opts...)
	if err != nil {
		return nil, err
	}
	z.d = d
	z.total = len(d.ParamArena())
	z.buckets = d.BucketRanges()
	z.pieces, err = Pieces(z.buckets, z.total, group.Size(), group.Rank())
	if err != nil {
		return nil, err
	}
	for _, p := range z.pieces {
		z.shard += p.Len()
	}
	if group.Size() == 1 {
		z.gradShard = d.GradArena()
	} else {
		z.gradShard = make([]T, z.shard)
	}
	return z, nil
}

// Pieces returns rank's piece of each bucket: chunk rank of n of every
// bucket, with its offset in the shard. The buckets (element ranges
// [lo, hi)) must tile [0, total) in order.
func Pieces(buckets [][2]int, total, n, rank int) ([]Piece, error) {
	if n < 1 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("zero: rank %d of %d", rank, n)
	}
	pieces := make([]Piece, len(buckets))
	next, off := 0, 0
	for b, r := range buckets {
		if r[0] != next || r[1] < r[0] {
			return nil, fmt.Errorf("zero: bucket %d is [%d, %d), want it to start at %d: buckets must tile the arena in order", b, r[0], r[1], next)
		}
		lo, hi := allreduce.ChunkBounds(r[1]-r[0], n, rank)
		pieces[b] = Piece{Lo: r[0] + lo, Hi: r[0] + hi, Off: off}
		off += hi - lo
		next = r[1]
	}
	if next != total {
		return nil, fmt.Errorf("zero: buckets cover [0, %d), the arena has %d elements", next, total)
	}
	return pieces, nil
}

// reduceScatterBucket averages bucket [lo, hi) of grads over ranks, leaving
// on each rank its piece in the shard's gradient: a ring reduce-scatter in
// N-1 steps, in which rank r sends every chunk of the bucket but its own,
// (N-1)/N of the bucket. With buddies the piece then goes to the buddy
// (buddy.exchangeBucket).
func (z *ZeRO1[T]) reduceScatterBucket(ctx context.Context, group *allreduce.Group, grads []T, lo, hi int) error {
	if group.Size() == 1 {
		return nil // the average over one rank, in place
	}
	b := sort.Search(len(z.buckets), func(i int) bool { return z.buckets[i][0] >= lo })
	if b == len(z.buckets) || z.buckets[b] != [2]int{lo, hi} {
		return fmt.Errorf("zero: [%d, %d) is not a bucket", lo, hi)
	}
	p := z.pieces[b]
	if err := allreduce.ReduceScatter(ctx, group, z.gradShard[p.Off:p.Off+p.Len()], grads[lo:hi], allreduce.Avg); err != nil {
		return err
	}
	return z.buddy.exchangeBucket(ctx, b)
}

// DDP is the underlying data-parallel wrapper (Tapped, Backward, Run,
// NoSync, statistics).
func (z *ZeRO1[T]) DDP() *ddp.DDP[T] { return z.d }

// Tapped returns the nodes the forward pass must use (see ddp.DDP.Tapped).
func (z *ZeRO1[T]) Tapped() G.Nodes { return z.d.Tapped() }

// Backward adds the hooked backward pass of loss (see ddp.DDP.Backward).
func (z *ZeRO1[T]) Backward(loss *G.Node) error { return z.d.Backward(loss) }

// Run runs forward and backward with the gradient buckets reduce-scattered
// as they complete (see ddp.DDP.Run). Afterwards GradShard holds this
// rank's shard of the gradient averaged over ranks; the gradient arena
// holds this rank's own gradient (on one rank, the two are the same).
func (z *ZeRO1[T]) Run(ctx context.Context, vm ddp.Machine) error { return z.d.Run(ctx, vm) }

// GradShard is this rank's shard of the averaged gradient after Run, in
// shard order (piece by piece, see Pieces).
func (z *ZeRO1[T]) GradShard() []T { return z.gradShard }

// Pieces is this rank's piece of each bucket, in bucket order: its shard.
func (z *ZeRO1[T]) Pieces() []Piece { return append([]Piece(nil), z.pieces...) }

// ShardLen is the number of elements in this rank's shard, the length of
// its optimizer state.
func (z *ZeRO1[T]) ShardLen() int { return z.shard }

// Optimizer is the shard's optimizer.
func (z *ZeRO1[T]) Optimizer() optim.Optimizer[T] { return z.opt }

// Step updates this rank's shard and all-gathers the parameters, one bucket
// at a time: rank r sends (M_b - |piece r+1 of b|) elements per bucket b.
// With the optimizer in backward Run has updated the shard already, piece
// by piece as each bucket's reduce-scatter completed (see shardStepper):
// Step only all-gathers.
func (z *ZeRO1[T]) Step(ctx context.Context) error {
	params := z.d.ParamArena()
	if z.ranged != nil {
		if err := z.d.Step(ctx, nil); err != nil {
			z.group.Abort(err) // the peers wait in the all-gather
			return err
		}
		z.lastOp = z.d.LastStats().Optimizer
	} else if err := z.updateShard(ctx, params); err != nil {
		return err
	}
	if z.group.Size() == 1 {
		return nil
	}
	obs, _ := z.d.Observer().(GatherObserver)
	for b, r := range z.buckets {
		p := z.pieces[b]
		began := time.Now()
		err := allreduce.AllGather(ctx, z.group, params[r[0]:r[1]], params[p.Lo:p.Hi])
		if obs != nil {
			var e T
			obs.ParamsGathered(b, (r[1]-r[0])*int(unsafe.Sizeof(e)), began, time.Now(), err)
		}
		if err != nil {
			return z.buddy.end(params, fmt.Errorf("zero: all-gather of the parameters of bucket %d: %w", b, err))
		}
	}
	return z.buddy.end(params, nil)
}

// updateShard is Step's update of the shard, with buddies' step 2 around
// it (buddy.go).
func (z *ZeRO1[T]) updateShard(ctx context.Context, params []T) error {
	z.buddy.begin(params, z.opt.LR())
	if err := z.stepShard(params); err != nil {
		return err
	}
	return z.buddy.receive(ctx, z.group)
}

// stepShard updates the shard with the optimizer's Step, the shard's
// parameters packed to the front of the arena for it.
func (z *ZeRO1[T]) stepShard(params []T) error {
	start := time.Now()
	z.pack(params)
	err := z.opt.Step(params[:z.shard], z.gradShard)
	z.unpack(params)
	if err != nil {
		// The peers wait in the all-gather for this rank's shard.
		err = fmt.Errorf("zero: optimizer step on a shard of %d elements: %w", z.shard, err)
		z.group.Abort(err)
		return err
	}
	z.lastOp = time.Since(start)
	return nil
}

// shardStepper is the shard's update in backward (ddp.BucketStepper):
// bucket b's piece is updated in place in the parameter arena, from its
// gradient in the shard, with the optimizer state at the piece's offset in
// the shard, as soon as its reduce-scatter has completed. Element for
// element it is the update Step makes of the packed shard.
type shardStepper[T ddp.Float] struct{ z *ZeRO1[T] }

func (s shardStepper[T]) BeginStep() error { return s.z.ranged.BeginStep(s.z.shard) }
func (s shardStepper[T]) EndStep() error   { return s.z.ranged.EndStep() }
func (s shardStepper[T]) StepBucket(b, _, _ int) error {
	z := s.z
	p := z.pieces[b]
	return z.ranged.StepRange(z.d.ParamArena()[p.Lo:p.Hi], z.gradShard[p.Off:p.Off+p.Len()], p.Off)
}

// GatherObserver is a ddp.Observer (ddp.WithObserver) that is also told
// of Step's all-gather of each bucket's parameters.
type GatherObserver interface {
	ParamsGathered(b, bytes int, start, end time.Time, err error)
}

// pack moves this rank's pieces of the parameter arena a to a[:shard], in
// shard order. Piece b moves down to Off ≤ Lo, and its destination ends at or
// before the end of bucket b, below every later piece's source: moving
// the pieces in order (copy is a memmove) overwrites nothing still needed.
func (z *ZeRO1[T]) pack(a []T) {
	for _, p := range z.pieces {
		if p.Off != p.Lo {
			copy(a[p.Off:p.Off+p.Len()], a[p.Lo:p.Hi])
		}
	}
}

// unpack undoes pack, moving the pieces back in reverse order: piece b's
// destination starts at or above its packed place, above every earlier
// piece's packed place, and ends before every later piece's (restored)
// place.
func (z *ZeRO1[T]) unpack(a []T) {
	for i := len(z.pieces) - 1; i >= 0; i-- {
		p := z.pieces[i]
		if p.Off != p.Lo {
			copy(a[p.Lo:p.Hi], a[p.Off:p.Off+p.Len()])
		}
	}
}

// LastOptimizerTime is how long the last Step's shard update took
// (excluding the all-gather).
func (z *ZeRO1[T]) LastOptimizerTime() time.Duration { return z.lastOp }

// StateBytes is the optimizer state held by this rank.
func (z *ZeRO1[T]) StateBytes() int64 { return z.opt.StateBytes() }

// shardState is this rank's optimizer state, checked against the shard. A
// failed check aborts the group, since the peers are about to wait for this
// rank in a collective.
func (z *ZeRO1[T]) shardState() (optim.State, error) {
	st := z.opt.State()
	for _, b := range st.Buffers {
		if len(b.Data) != z.shard {
			err := fmt.Errorf("zero: optimizer buffer %q has %d elements, the shard has %d", b.Name, len(b.Data), z.shard)
			z.group.Abort(err)
			return optim.State{}, err
		}
	}
	return st, nil
}

// fullHeader is st (a shard's state) with no buffers, covering the arena:
// Len is 0 before the first step, as optim.State requires.
func (z *ZeRO1[T]) fullHeader(st optim.State) optim.State {
	full := st
	full.Hyper = append([]optim.Hyper(nil), st.Hyper...)
	full.Buffers = nil
	full.Len = 0
	if st.Step > 0 || len(st.Buffers) > 0 {
		full.Len = z.total
	}
	return full
}

// FullOptimizerState gathers the optimizer state of every shard into the
// state of one optimizer over the whole arena (as a DDP rank would hold
// it), on every rank: one all-gather per bucket and state buffer, (N-1)/N
// of the buffer sent per rank. Every rank then holds the full state, N
// times what ZeRO-1 saves; a checkpoint written by one rank wants
// GatherOptimizerState instead. It is a collective: every rank must call
// it.
func (z *ZeRO1[T]) FullOptimizerState(ctx context.Context) (optim.State, error) {
	st, err := z.shardState()
	if err != nil {
		return optim.State{}, err
	}
	full := z.fullHeader(st)
	for _, b := range st.Buffers {
		data := make([]float64, z.total)
		if z.group.Size() == 1 {
			copy(data, b.Data)
			full.Buffers = append(full.Buffers, optim.Buffer{Name: b.Name, Data: data})
			continue
		}
		for k, r := range z.buckets {
			p := z.pieces[k]
			if err := allreduce.AllGather(ctx, z.group, data[r[0]:r[1]], b.Data[p.Off:p.Off+p.Len()]); err != nil {
				return optim.State{}, fmt.Errorf("zero: gathering optimizer buffer %q: %w", b.Name, err)
			}
		}
		full.Buffers = append(full.Buffers, optim.Buffer{Name: b.Name, Data: data})
	}
	return full, nil
}

// GatherOptimizerState gathers the optimizer state of every shard into the
// state of one optimizer over the whole arena (as FullOptimizerState) on
// rank root only; every other rank gets the zero optim.State and a nil
// error. Only root ever holds the full state: another rank holds its own
// shard's state and one segment of scratch (gatherSegment elements). It is
// a collective: every rank must call it with the same root.
//
// It is built from Broadcast, the group's one collective that moves a
// rank's data without a full-size buffer on every rank: each rank q ≠ root
// broadcasts its pieces of every state buffer, segment by segment, and root
// receives them in place in the full buffers. A tree broadcast delivers a
// segment to all N-1 other ranks, so for a buffer of E elements (8 bytes
// each) of which root holds E_root, 8·(N-1)·(E - E_root) bytes are sent in
// all, N-1 times what a point-to-point gather would send; root receives
// 8·(E - E_root), once each.
func (z *ZeRO1[T]) GatherOptimizerState(ctx context.Context, root int) (optim.State, error) {
	n, rank := z.group.Size(), z.group.Rank()
	if root < 0 || root >= n {
		err := fmt.Errorf("zero: gather root %d out of range [0, %d)", root, n)
		z.group.Abort(err)
		return optim.State{}, err
	}
	st, err := z.shardState()
	if err != nil {
		return optim.State{}, err
	}
	var full optim.State
	if rank == root {
		full = z.fullHeader(st)
		for _, b := range st.Buffers {
			data := make([]float64, z.total)
			for _, p := range z.pieces {
				copy(data[p.Lo:p.Hi], b.Data[p.Off:p.Off+p.Len()])
			}
			full.Buffers = append(full.Buffers, optim.Buffer{Name: b.Name, Data: data})
		}
	}
	var scratch []float64
	for q := 0; q < n; q++ {
		if q == root {
			continue
		}
		pieces := z.pieces
		if q != rank {
			if pieces, err = Pieces(z.buckets, z.total, n, q); err != nil {
				return optim.State{}, err
			}
		}
		for k, b := range st.Buffers {
			for _, p := range pieces {
				for lo := 0; lo < p.Len(); lo += gatherSegment {
					hi := min(lo+gatherSegment, p.Len())
					var buf []float64
					switch rank {
					case q:
						buf = b.Data[p.Off+lo : p.Off+hi]
					case root:
						buf = full.Buffers[k].Data[p.Lo+lo : p.Lo+hi]
					default:
						if scratch == nil {
							scratch = make([]float64, min(gatherSegment, z.maxPiece()))
						}
						buf = scratch[:hi-lo]
					}
					if err := allreduce.Broadcast(ctx, z.group, buf, q); err != nil {
						return optim.State{}, fmt.Errorf("zero: gathering optimizer buffer %q from rank %d onto rank %d: %w", b.Name, q, root, err)
					}
				}
			}
		}
	}
	if rank != root {
		return optim.State{}, nil
	}
	return full, nil
}

// maxPiece is the longest piece of any rank: chunk 0 of the longest bucket.
func (z *ZeRO1[T]) maxPiece() int {
	longest := 0
	for _, r := range z.buckets {
		lo, hi := allreduce.ChunkBounds(r[1]-r[0], z.group.Size(), 0)
		longest = max(longest, hi-lo)
	}
	return longest
}

// gatherSegment is the most elements GatherOptimizerState moves in one
// collective: it bounds the scratch of the ranks that only relay (1 MiB).
// A variable so that tests can make every piece several segments.
var gatherSegment = 1 << 17

// LoadFullOptimizerState loads this rank's shard of a full optimizer state
// (from FullOptimizerState or GatherOptimizerState, or from a DDP run's
// optimizer), so a checkpoint resumes under any number of ranks; with
// buddies, the copy of the left rank's shard too.
func (z *ZeRO1[T]) LoadFullOptimizerState(full optim.State) error {
	if full.Len != 0 && full.Len != z.total {
		return fmt.Errorf("zero: optimizer state covers %d parameters, the model has %d", full.Len, z.total)
	}
	if err := full.Validate(); err != nil {
		return fmt.Errorf("zero: loading optimizer state: %w", err)
	}
	own := cutShard(full, z.pieces, z.shard)
	if err := z.opt.LoadState(own); err != nil {
		return fmt.Errorf("zero: loading optimizer state: %w", err)
	}
	return z.buddy.loadFull(full, own)
}
