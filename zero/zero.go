// Package zero is ZeRO stage 1 for ringddp: optimizer state sharded over
// ranks.
//
// Vocabulary:
//   - shard: rank r owns chunk r of the flat parameter arena, the element
//     range allreduce.ChunkBounds(total, N, r) — exactly where a ring
//     reduce-scatter leaves rank r's result, so no copy is needed.
//     A parameter may straddle two shards (DeepSpeed's flat partitioning);
//     the element-wise optimizers do not care.
//
// A step is the DDP step with two collectives in place of the all-reduce:
//
//  1. backward: each gradient bucket, as soon as it is complete, is
//     reduce-scattered (Avg) along the shard boundaries (ReduceScatterV),
//     so rank r ends with the averaged gradient of its shard's part of the
//     bucket — overlapping the rest of the backward pass as in DDP;
//  2. the optimizer updates rank r's shard only, with state for that shard
//     only: 1/N of DDP's optimizer memory;
//  3. all-gather of the updated shards straight into every rank's arena.
//
// Bytes sent per step, summed over ranks: (N-1)·M for the reduce-scatter and
// (N-1)·M for the all-gather, the same 2(N-1)·M as DDP's ring all-reduce.
package zero

import (
	"context"
	"fmt"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// ZeRO1 is one rank's ZeRO-1 wrapper: a ddp.DDP whose buckets are
// reduce-scattered, and an optimizer over this rank's shard.
type ZeRO1[T ddp.Float] struct {
	d      *ddp.DDP[T]
	opt    optim.Optimizer[T]
	group  *allreduce.Group
	lo, hi int   // this rank's shard of the arenas
	bounds []int // shard boundaries: shard q is [bounds[q], bounds[q+1])
	counts []int // scratch: per-rank element counts of one bucket
	lastOp time.Duration
}

// Wrap wraps params like ddp.Wrap (same options) and makes opt the
// optimizer of this rank's shard. opt must be fresh (its state is sized to
// the shard at the first step).
func Wrap[T ddp.Float](ctx context.Context, group *allreduce.Group, params G.Nodes, opt optim.Optimizer[T], opts ...ddp.Option) (*ZeRO1[T], error) {
	if opt == nil {
		return nil, fmt.Errorf("zero: nil optimizer")
	}
	z := &ZeRO1[T]{opt: opt, group: group}
	opts = append(opts, ddp.WithBucketCollective[T](z.reduceScatterBucket))
	d, err := ddp.Wrap[T](ctx, group, params, opts...)
	if err != nil {
		return nil, err
	}
	z.d = d
	n, total := group.Size(), len(d.ParamArena())
	z.bounds = make([]int, n+1)
	for q := 0; q < n; q++ {
		z.bounds[q], z.bounds[q+1] = allreduce.ChunkBounds(total, n, q)
	}
	z.lo, z.hi = z.bounds[group.Rank()], z.bounds[group.Rank()+1]
	z.counts = make([]int, n)
	return z, nil
}

// reduceScatterBucket averages bucket [lo, hi) of grads over ranks, leaving
// on each rank the part that falls in its shard.
func (z *ZeRO1[T]) reduceScatterBucket(ctx context.Context, group *allreduce.Group, grads []T, lo, hi int) error {
	for q := range z.counts {
		z.counts[q] = max(0, min(hi, z.bounds[q+1])-max(lo, z.bounds[q]))
	}
	mlo := min(max(lo, z.lo), hi)
	mhi := max(min(hi, z.hi), mlo)
	return allreduce.ReduceScatterV(ctx, group, grads[mlo:mhi], grads[lo:hi], z.counts, allreduce.Avg)
}

// DDP is the underlying data-parallel wrapper (Tapped, Backward, Run,
// NoSync, statistics).
func (z *ZeRO1[T]) DDP() *ddp.DDP[T] { return z.d }

// Tapped returns the nodes the forward pass must use (see ddp.DDP.Tapped).
func (z *ZeRO1[T]) Tapped() G.Nodes { return z.d.Tapped() }

// Backward adds the hooked backward pass of loss (see ddp.DDP.Backward).
func (z *ZeRO1[T]) Backward(loss *G.Node) error { return z.d.Backward(loss) }

// Run runs forward and backward with the gradient buckets reduce-scattered
// as they complete (see ddp.DDP.Run).
func (z *ZeRO1[T]) Run(ctx context.Context, vm ddp.Machine) error { return z.d.Run(ctx, vm) }

// Shard is this rank's element range [lo, hi) of the arenas.
func (z *ZeRO1[T]) Shard() (lo, hi int) { return z.lo, z.hi }

// Optimizer is the shard's optimizer.
func (z *ZeRO1[T]) Optimizer() optim.Optimizer[T] { return z.opt }

// Step updates this rank's shard and all-gathers the parameters.
func (z *ZeRO1[T]) Step(ctx context.Context) error {
	start := time.Now()
	params, grads := z.d.ParamArena(), z.d.GradArena()
	if err := z.opt.Step(params[z.lo:z.hi], grads[z.lo:z.hi]); err != nil {
		return fmt.Errorf("zero: optimizer step on shard [%d, %d): %w", z.lo, z.hi, err)
	}
	z.lastOp = time.Since(start)
	if err := allreduce.AllGather(ctx, z.group, params, params[z.lo:z.hi]); err != nil {
		return fmt.Errorf("zero: all-gather of parameters: %w", err)
	}
	return nil
}

// LastOptimizerTime is how long the last Step's shard update took
// (excluding the all-gather).
func (z *ZeRO1[T]) LastOptimizerTime() time.Duration { return z.lastOp }

// StateBytes is the optimizer state held by this rank.
func (z *ZeRO1[T]) StateBytes() int64 { return z.opt.StateBytes() }

// FullOptimizerState gathers the optimizer state of every shard into the
// state of one optimizer over the whole arena (as a DDP rank would hold
// it), on every rank. It is a collective: every rank must call it.
func (z *ZeRO1[T]) FullOptimizerState(ctx context.Context) (optim.State, error) {
	st := z.opt.State()
	total := z.bounds[len(z.bounds)-1]
	full := st.Clone()
	full.Len = total
	if st.Step == 0 && len(st.Buffers) == 0 {
		full.Len = 0
		return full, nil
	}
	for i, b := range st.Buffers {
		if len(b.Data) != z.hi-z.lo {
			return optim.State{}, fmt.Errorf("zero: optimizer buffer %q has %d elements, shard has %d", b.Name, len(b.Data), z.hi-z.lo)
		}
		data := make([]float64, total)
		if err := allreduce.AllGather(ctx, z.group, data, b.Data); err != nil {
			return optim.State{}, fmt.Errorf("zero: gathering optimizer buffer %q: %w", b.Name, err)
		}
		full.Buffers[i].Data = data
	}
	return full, nil
}

// LoadFullOptimizerState loads this rank's shard of a full optimizer state
// (from FullOptimizerState, or from a DDP run's optimizer), so a checkpoint
// resumes under any number of ranks.
func (z *ZeRO1[T]) LoadFullOptimizerState(full optim.State) error {
	total := z.bounds[len(z.bounds)-1]
	if full.Len != 0 && full.Len != total {
		return fmt.Errorf("zero: optimizer state covers %d parameters, the model has %d", full.Len, total)
	}
	shard := full
	if full.Len != 0 {
		var err error
		if shard, err = optim.SliceState(full, z.lo, z.hi); err != nil {
			return fmt.Errorf("zero: slicing optimizer state to shard [%d, %d): %w", z.lo, z.hi, err)
		}
	}
	if err := z.opt.LoadState(shard); err != nil {
		return fmt.Errorf("zero: loading optimizer state: %w", err)
	}
	return nil
}
