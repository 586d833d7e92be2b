package ddp

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// AutoCompression compresses a bucket to 16 bits (Compression, with
// error feedback) only where the cost model says it pays: at a bucket's
// first step it
//
//  1. prices the bucket's all-reduce on the group's shape under the
//     model, in its own element type and in 16 bits (each the fastest
//     algorithm allreduce.Predict lists);
//  2. times the compression's own work on this rank's cores (forming y,
//     encoding, decoding twice: round and widen) on a buffer of the
//     bucket's size, the least of a few runs, and takes the largest
//     such time over the ranks (a max all-reduce), so that every rank
//     decides alike;
//  3. compresses the bucket from then on exactly when the link time saved
//     exceeds that work, and logs the decision once.
//
// Buckets left uncompressed are all-reduced (Avg) as without a hook.
type AutoCompression[T Float] struct {
	inner   *Compression[T]
	model   *cost.Model // nil: cost.DefaultModelFor the group's shape
	logf    func(format string, args ...any)
	decided map[int]bool
}

// NewAutoCompression returns the hook for one DDP. model is the cost
// model to price the link with (nil: the default for the group's shape;
// pass the profile the group was given with allreduce.WithModel, for a
// link the defaults do not know); logf, if not nil, gets each bucket's
// decision once.
func NewAutoCompression[T Float](format Half, model *cost.Model, logf func(format string, args ...any)) (*AutoCompression[T], error) {
	inner, err := NewCompression[T](format, true)
	if err != nil {
		return nil, err
	}
	if model != nil {
		if err := model.Validate(); err != nil {
			return nil, fmt.Errorf("ddp: auto compression's cost model: %w", err)
		}
	}
	return &AutoCompression[T]{inner: inner, model: model, logf: logf, decided: map[int]bool{}}, nil
}

// Compresses reports the decision taken for bucket index, and whether
// one was taken yet.
func (a *AutoCompression[T]) Compresses(index int) (compress, decided bool) {
	compress, decided = a.decided[index]
	return compress, decided
}

// Reduce is the hook (see AutoCompression).
func (a *AutoCompression[T]) Reduce(ctx context.Context, b *GradBucket[T]) error {
	compress, ok := a.decided[b.index]
	if !ok {
		var err error
		if compress, err = a.decide(ctx, b); err != nil {
			return err
		}
		a.decided[b.index] = compress
	}
	if compress {
		return a.inner.Reduce(ctx, b)
	}
	return allreduce.AllReduce(ctx, b.group, b.buffer, allreduce.Avg)
}

// decide is steps 1 to 3 for bucket b. Every rank calls it at the same
// bucket, so its collectives match.
func (a *AutoCompression[T]) decide(ctx context.Context, b *GradBucket[T]) (bool, error) {
	g := b.group
	shape, err := g.Shape(ctx)
	if err != nil {
		return false, fmt.Errorf("auto compression: the group's shape: %w", err)
	}
	m := cost.DefaultModelFor(shape)
	if a.model != nil {
		m = *a.model
	}
	var z T
	bytes := len(b.buffer) * int(unsafe.Sizeof(z))
	full := math.Inf(1)
	for _, p := range allreduce.Predict(m, shape, bytes) {
		full = min(full, p.Seconds)
	}
	half := math.Inf(1)
	for _, p := range allreduce.Predict(m, shape, 2*len(b.buffer)) {
		half = min(half, p.Seconds)
	}
	work := []float64{a.inner.work(len(b.buffer), g.Size())}
	if err := allreduce.AllReduce(ctx, g, work, allreduce.Max); err != nil {
		return false, fmt.Errorf("auto compression: agreeing on the compression time: %w", err)
	}
	compress := full-half > work[0]
	if a.logf != nil {
		verdict := "all-reduced uncompressed"
		if compress {
			verdict = "compressed to " + a.inner.format.String()
		}
		a.logf("ddp: auto compression: bucket %d (%d bytes): link %.3g ms, %.3g ms compressed; compression work %.3g ms: %s",
			b.index, bytes, full*1e3, half*1e3, work[0]*1e3, verdict)
	}
	return compress, nil
}

// work is the seconds this rank's Reduce spends on its own arithmetic for
// a bucket of n elements on size ranks (round and widen): the least of
// three timed runs on a scratch bucket.
func (h *Compression[T]) work(n, size int) float64 {
	buf := make([]T, n)
	for i := range buf {
		buf[i] = T(i%97) * 0.01
	}
	st := &halfBucket[T]{c: make([]uint16, n), errs: make([]T, n)}
	best := math.Inf(1)
	for range 3 {
		start := time.Now()
		h.round(st, buf, size)
		h.widen(st, buf)
		best = min(best, time.Since(start).Seconds())
	}
	return best
}
