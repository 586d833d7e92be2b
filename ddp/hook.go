package ddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// CommHook communicates one bucket in place of the default all-reduce
// (PyTorch's DDP communication hook, register_comm_hook): given a complete
// bucket, it leaves in the bucket's buffer, on every rank, the gradient
// averaged over the group, or the approximation of it that the hook
// computes (compressed hooks). Every rank's hook must call the same
// collectives in the same order, as the buckets come in the same order.
//
// The hook runs on the DDP's communication goroutine (the last bucket on
// Run's goroutine, after the backward pass), one bucket at a time in
// bucket order, while the backward pass goes on: where PyTorch's
// hook returns a future, this one returns when its bucket is done and the
// next bucket waits for it. A hook holds per-bucket state (error
// feedback, warm starts) keyed by GradBucket.Index, so a DDP needs a hook
// of its own: do not share one between ranks or wrappers.
type CommHook[T Float] interface {
	Reduce(ctx context.Context, b *GradBucket[T]) error
}

// CommHookFunc is a stateless CommHook.
type CommHookFunc[T Float] func(ctx context.Context, b *GradBucket[T]) error

// Reduce calls f.
func (f CommHookFunc[T]) Reduce(ctx context.Context, b *GradBucket[T]) error { return f(ctx, b) }

// WithCommHook makes every bucket's communication h's (see CommHook).
// It excludes WithBucketCollective. With WithAgreement the agreement's
// values are all-reduced right after the last bucket's hook.
func WithCommHook[T Float](h CommHook[T]) Option {
	return func(c *config) { c.hook = h }
}

// GradBucket is what a communication hook sees of one bucket (PyTorch's
// GradBucket): its index, its flat gradient buffer, the parameters in it
// with their offsets and shapes, whether it is the last bucket of the
// step, and the group. The buffer is a view of the DDP's gradient arena,
// valid only during the hook's call; the rest is fixed for the DDP's
// lifetime.
type GradBucket[T Float] struct {
	index   int
	last    bool
	buffer  []T
	params  []int   // parameter indices (creation order), in buffer order
	offsets []int   // params[k]'s first element in buffer
	sizes   []int   // params[k]'s element count
	shapes  [][]int // params[k]'s shape
	group   *allreduce.Group
}

// Index is the bucket's index: 0 is the first bucket communicated in a
// step (the last layers' gradients).
func (b *GradBucket[T]) Index() int { return b.index }

// IsLast reports whether this is the step's last bucket to be
// communicated (PyTorch's is_last; here the highest index).
func (b *GradBucket[T]) IsLast() bool { return b.last }

// Buffer is the bucket's flat gradient buffer: this rank's gradients on
// entry, the averaged gradients when the hook returns.
func (b *GradBucket[T]) Buffer() []T { return b.buffer }

// Len is the number of parameters in the bucket.
func (b *GradBucket[T]) Len() int { return len(b.params) }

// Parameter is the index, in the wrapped parameter list, of the bucket's
// k-th parameter.
func (b *GradBucket[T]) Parameter(k int) int { return b.params[k] }

// Offset is the bucket's k-th parameter's first element in Buffer.
func (b *GradBucket[T]) Offset(k int) int { return b.offsets[k] }

// Shape is the bucket's k-th parameter's shape (a copy).
func (b *GradBucket[T]) Shape(k int) []int { return append([]int(nil), b.shapes[k]...) }

// Gradient is the bucket's k-th parameter's gradient: a view of Buffer.
func (b *GradBucket[T]) Gradient(k int) []T {
	lo := b.offsets[k]
	return b.buffer[lo : lo+b.sizes[k] : lo+b.sizes[k]]
}

// Group is the communicator the bucket is reduced over.
func (b *GradBucket[T]) Group() *allreduce.Group { return b.group }

// NewGradBucket builds a bucket over buffer for a hook called outside a
// DDP (tests, benchmarks, a hook composed of others): the parameters are
// given by their shapes, laid out in buffer one after the other in that
// order, which must cover it exactly.
func NewGradBucket[T Float](g *allreduce.Group, index int, last bool, buffer []T, shapes [][]int) (*GradBucket[T], error) {
	if g == nil {
		return nil, errors.New("ddp: NewGradBucket: nil group")
	}
	b := &GradBucket[T]{index: index, last: last, buffer: buffer, group: g}
	off := 0
	for k, s := range shapes {
		n := 1
		for _, d := range s {
			if d <= 0 {
				return nil, fmt.Errorf("ddp: NewGradBucket: parameter %d has shape %v", k, s)
			}
			n *= d
		}
		b.params = append(b.params, k)
		b.offsets = append(b.offsets, off)
		b.sizes = append(b.sizes, n)
		b.shapes = append(b.shapes, append([]int(nil), s...))
		off += n
	}
	if off != len(buffer) {
		return nil, fmt.Errorf("ddp: NewGradBucket: shapes cover %d elements, the buffer has %d", off, len(buffer))
	}
	return b, nil
}

// hookCollective is the BucketCollective that calls h with each bucket's
// GradBucket, built once from the layout. A range that is not a bucket
// is an error (it cannot happen from reduceBuckets).
func (d *DDP[T]) hookCollective(hook any) (BucketCollective[T], error) {
	h, ok := hook.(CommHook[T])
	if !ok {
		return nil, fmt.Errorf("ddp: communication hook %T does not match the wrapper's element type", hook)
	}
	if d.cfg.collective != nil {
		return nil, errors.New("ddp: WithCommHook and WithBucketCollective both given: choose one")
	}
	byLo := make(map[int]*GradBucket[T], len(d.buckets))
	for i, r := range d.buckets {
		b := &GradBucket[T]{index: i, last: i == len(d.buckets)-1, group: d.group}
		byLo[r.lo] = b
	}
	// Slots in arena order: reverse creation order of the parameters.
	for k := len(d.slots) - 1; k >= 0; k-- {
		s := d.slots[k]
		b := byLo[d.buckets[s.bucket].lo]
		b.params = append(b.params, s.param)
		b.offsets = append(b.offsets, s.offset-d.buckets[s.bucket].lo)
		b.sizes = append(b.sizes, s.size)
		b.shapes = append(b.shapes, append([]int(nil), d.params[s.param].Shape()...))
	}
	return func(ctx context.Context, _ *allreduce.Group, grads []T, lo, hi int) error {
		b := byLo[lo]
		if b == nil || d.buckets[b.index].hi != hi {
			return fmt.Errorf("ddp: communication hook called on [%d, %d), which is not a bucket", lo, hi)
		}
		b.buffer = grads[lo:hi:hi]
		err := h.Reduce(ctx, b)
		b.buffer = nil
		if err != nil {
			err = fmt.Errorf("communication hook on bucket %d: %w", b.index, err)
			// Peers may be waiting in this bucket's collectives: fail
			// them now rather than at their timeout.
			d.group.Abort(fmt.Errorf("rank %d: %w", d.group.Rank(), err))
			return err
		}
		return nil
	}, nil
}
