package ddp

import (
	"context"
	"fmt"
	"time"
	"unsafe"
)

// Who communicates which bucket. The buckets but the last are
// communicated in order by a goroutine that Run starts, each as soon as
// its gradients are complete, while the backward pass goes on; the last
// bucket holds the first layers and is complete only when the backward
// pass is, so Run communicates it on its own goroutine once vm.RunAll has
// returned and that goroutine is done. Nothing thus waits for a goroutine
// to be woken between the backward pass's end and the last collective, nor
// after it: with the optimizer in backward, Run's goroutine goes on to
// the last updates (overlap_queue.go) and returns.

// reduceBuckets communicates every bucket in order, each as soon as it is
// complete (reducePrefix), and reports on done: Join's shadow step.
func (d *DDP[T]) reduceBuckets(ctx context.Context, start time.Time, stats *StepStats, upd *updates, abort <-chan struct{}, done chan<- error) {
	done <- d.reducePrefix(ctx, len(d.buckets), start, stats, upd, abort)
}

// reducePrefix communicates buckets [0, n) in order, each as soon as it is
// complete, until abort is closed or a collective fails.
func (d *DDP[T]) reducePrefix(ctx context.Context, n int, start time.Time, stats *StepStats, upd *updates, abort <-chan struct{}) error {
	for b := range n {
		select {
		case <-d.ready[b]:
		case <-abort:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("ddp: waiting for bucket %d: %w", b, ctx.Err())
		}
		if err := d.communicate(ctx, b, start, stats, upd); err != nil {
			return err
		}
	}
	return nil
}

// reduceLastBucket is Run's communication of the last bucket, complete
// once the backward pass has returned.
func (d *DDP[T]) reduceLastBucket(ctx context.Context, start time.Time, stats *StepStats, upd *updates) error {
	last := len(d.buckets) - 1
	select {
	case <-d.ready[last]:
	default:
		// The backward pass gave every parameter's gradient (settleUnused):
		// a bucket still incomplete is a broken invariant, not a wait.
		err := fmt.Errorf("ddp: bucket %d incomplete after the backward pass", last)
		d.group.Abort(fmt.Errorf("rank %d: %w", d.group.Rank(), err))
		return err
	}
	return d.communicate(ctx, last, start, stats, upd)
}

// communicate runs bucket b's collective, records it in stats and with
// the observer, and hands it to upd (if any: in parts as they become
// final, or whole once communicated; after the last bucket the caller
// applies what is left, see hand).
func (d *DDP[T]) communicate(ctx context.Context, b int, start time.Time, stats *StepStats, upd *updates) error {
	r := d.buckets[b]
	began := time.Now()
	if b == 0 {
		stats.FirstBucketStart = began.Sub(start)
	}
	var err error
	fin := upd.rangesFor(b, r.lo, r.hi) // nil: no parts reported
	if b == len(d.buckets)-1 {
		err = d.reduceLast(ctx, r.lo, r.hi, fin)
	} else {
		err = d.reduceBucket(ctx, r.lo, r.hi, fin)
	}
	ended := time.Now()
	stats.Comm += ended.Sub(began)
	var z T
	bytes := (r.hi - r.lo) * int(unsafe.Sizeof(z))
	if o := d.cfg.observer; o != nil {
		o.BucketReduced(b, bytes, d.collectiveName(bytes), began, ended, err)
	}
	if err != nil {
		return fmt.Errorf("ddp: communicating bucket %d: %w", b, err)
	}
	stats.Buckets++
	stats.CommEnd = ended
	if upd != nil {
		d.hand(upd, b)
	}
	stats.BucketBytes += int64(bytes)
	return nil
}
