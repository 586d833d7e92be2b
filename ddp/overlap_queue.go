package ddp

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// The updates of one Run with the optimizer in backward. The goroutine
// that communicates a bucket (the communication goroutine for all but the
// last, Run's own goroutine for the last: see Run) hands spans of the
// arenas to a queue as their gradients become final; the update goroutine
// takes them in order and applies the stepper to each. How fine the spans
// are:
//
//   - with WithOptimizerInBackward and the default all-reduce, a span is
//     a part of a bucket that the all-reduce reports final
//     (allreduce.AllReduceRanges: this rank's chunk once the reduce-scatter
//     is done, then each chunk the all-gather brings), cut to at most
//     spanElems elements; a bucket's update thus overlaps the rest of its
//     own all-gather, not only the next buckets' collectives;
//   - otherwise (a BucketStepper such as ZeRO-1's, a custom bucket
//     collective or communication hook, which need not leave every rank
//     every value), a span is a whole bucket, handed over once its
//     collective has returned; the last bucket is not handed over but
//     updated by Run's goroutine, which would otherwise wait for it.
//
// When the last bucket's collective has returned nothing is left to
// overlap, and Run's goroutine finishes the step without sleeping:
//
//  1. it takes spans from the queue itself, beside the update goroutine,
//     until the queue is empty;
//  2. it waits for the update goroutine's span in progress, if any, by
//     spinning (yielding its thread to other goroutines) for at most
//     spinFor, and only past that sleeps until that goroutine wakes it;
//  3. it marks the step settled. The update goroutine has exited by
//     itself, or will: it exits once every element it can be handed (the
//     count pending) has been handed over and the queue is empty, so no
//     goroutine is woken at the end of a step either.
//
// Spans are disjoint and the optimizers element-wise (optim.Ranged), so
// which goroutine updates which span, and in which order, changes no bit.

// spanElems is the most elements of one span of a reported range, so that
// the two goroutines share the tail of the last bucket evenly.
const spanElems = 16 << 10

// span is bucket b's elements [lo, hi) of the arenas.
type span struct{ b, lo, hi int }

// worker is one goroutine's share of the updates: set by it, read after
// both are done.
type worker struct {
	err   error
	total time.Duration // time spent updating
	end   time.Time     // when its last update ended
}

// spinFor is how long Run's goroutine spins, after the last bucket, for
// the update goroutine's span in progress before it sleeps until that
// goroutine wakes it: longer than the update of spanElems elements, so
// sleeping is only for a BucketStepper's whole bucket.
const spinFor = 200 * time.Microsecond

// updates is one Run's queue of spans and its update goroutine.
type updates struct {
	ranged bool // spans are the parts the all-reduce reports final
	mu     sync.Mutex
	queue  []span // handed over, not yet taken
	// pending counts the step's elements not yet handed over: the spans
	// of a step cover every bucket once, so it ends at 0, and the update
	// goroutine exits when it is 0 and the queue empty.
	pending int
	closed  bool // nothing more will be handed over
	busy    bool // the update goroutine is applying a span
	parked  bool // the update goroutine sleeps until a send on wake
	// waiting: Run's goroutine sleeps until a send on idle (the update
	// goroutine's span ends).
	waiting bool
	// settled: every span was applied (set and read by Run's goroutine
	// alone, after the last bucket; the update goroutine may still be
	// exiting).
	settled bool
	wake    chan struct{}
	idle    chan struct{}
	done    chan struct{} // closed when the update goroutine exits
	worker  worker        // the update goroutine's
	comm    worker        // Run's goroutine's, after the last bucket
	// The bucket being communicated and the arena range its reports are
	// kept to (the last bucket's collective may carry the agreement's
	// values after it): set by the goroutine that communicates it, which
	// alone reports.
	bucket, lo, hi int
	report         allreduce.RangeDone
}

// startUpdates begins the step (BeginStep) and starts the update goroutine;
// nil when this Run updates nothing (no stepper, or not synchronising).
func (d *DDP[T]) startUpdates() (*updates, error) {
	if d.stepper == nil || !d.syncing {
		return nil, nil
	}
	if err := d.stepper.BeginStep(); err != nil {
		return nil, fmt.Errorf("ddp: optimizer in backward: %w", err)
	}
	_, arena := d.stepper.(arenaStepper[T])
	u := &updates{ranged: arena && d.reduce == nil,
		wake: make(chan struct{}, 1), idle: make(chan struct{}, 1), done: make(chan struct{})}
	for b, r := range d.buckets {
		if u.ranged || b < len(d.buckets)-1 { // see hand
			u.pending += r.hi - r.lo
		}
	}
	u.report = u.reported
	if u.pending == 0 { // nothing to hand over: one bucket, updated by hand
		close(u.done)
		return u, nil
	}
	go func() {
		defer close(u.done)
		for {
			s, ok := u.take()
			if !ok {
				return
			}
			d.apply(&u.worker, s)
			u.mu.Lock()
			u.busy = false
			waiting := u.waiting
			u.waiting = false
			u.mu.Unlock()
			if waiting {
				u.idle <- struct{}{}
			}
		}
	}()
	return u, nil
}

// rangesFor readies u for bucket b's collective over the arena range
// [lo, hi) and returns what the collective reports final parts to (nil:
// the bucket is handed over whole when its collective returns). Nil-safe.
func (u *updates) rangesFor(b, lo, hi int) allreduce.RangeDone {
	if u == nil || !u.ranged {
		return nil
	}
	u.bucket, u.lo, u.hi = b, lo, hi
	return u.report
}

// reported is the RangeDone of the bucket being communicated: elements
// [a, b) of its collective's buffer, which starts at u.lo, are final.
func (u *updates) reported(a, b int) {
	lo, hi := u.lo+a, min(u.lo+b, u.hi)
	for ; lo < hi; lo += spanElems {
		u.push(span{u.bucket, lo, min(lo+spanElems, hi)})
	}
}

// push hands s to the update goroutine.
func (u *updates) push(s span) {
	u.mu.Lock()
	u.queue = append(u.queue, s)
	u.pending -= s.hi - s.lo
	u.unlockWaking()
}

// unlockWaking unlocks u.mu, waking the update goroutine if it sleeps (it
// then looks at the queue and the counts again).
func (u *updates) unlockWaking() {
	parked := u.parked
	u.parked = false
	u.mu.Unlock()
	if parked {
		u.wake <- struct{}{} // one send per sleep, into a buffer of one: never blocks
	}
}

// take returns the update goroutine's next span, sleeping until there is
// one while more may come, and marks the goroutine busy; it reports false
// once the queue is closed, or empty with every element of the step
// handed over.
func (u *updates) take() (span, bool) {
	for {
		u.mu.Lock()
		if len(u.queue) > 0 {
			s := u.queue[0]
			u.queue = u.queue[1:]
			u.busy = true
			u.mu.Unlock()
			return s, true
		}
		if u.closed || u.pending <= 0 {
			u.mu.Unlock()
			return span{}, false
		}
		u.parked = true
		u.mu.Unlock()
		<-u.wake
	}
}

// close says that nothing more will be handed over.
func (u *updates) close() {
	u.mu.Lock()
	u.closed = true
	u.unlockWaking()
}

// apply updates span s, on w's account; after w's first failure it only
// drains.
func (d *DDP[T]) apply(w *worker, s span) {
	if w.err != nil {
		return
	}
	began := time.Now()
	if err := d.stepper.StepBucket(s.b, s.lo, s.hi); err != nil {
		w.err = fmt.Errorf("ddp: optimizer in backward, bucket %d: %w", s.b, err)
	}
	w.end = time.Now()
	w.total += w.end.Sub(began)
}

// hand is called once bucket b's collective has returned, by the
// goroutine that ran it. A bucket not reported in parts is handed over
// whole, but for the last, which Run's goroutine updates itself (handing
// it over would wake the update goroutine only for it to find the work
// taken). After the last bucket Run's goroutine updates spans until none
// is left and the update goroutine's span in progress has ended.
func (d *DDP[T]) hand(u *updates, b int) {
	last := b == len(d.buckets)-1
	if !u.ranged {
		r := d.buckets[b]
		if !last {
			u.push(span{b, r.lo, r.hi})
		} else {
			d.apply(&u.comm, span{b, r.lo, r.hi})
		}
	}
	if !last {
		return
	}
	var deadline time.Time // of the spin
	for {
		u.mu.Lock()
		switch {
		case len(u.queue) > 0:
			s := u.queue[0]
			u.queue = u.queue[1:]
			u.mu.Unlock()
			d.apply(&u.comm, s)
		case !u.busy:
			// The queue is empty, nothing more comes and the update
			// goroutine's last span is done: every span is applied.
			u.closed, u.settled = true, true
			u.unlockWaking() // it sleeps only if some element was never reported
			return
		case deadline.IsZero() || time.Now().Before(deadline):
			u.mu.Unlock()
			if deadline.IsZero() {
				deadline = time.Now().Add(spinFor)
			}
			runtime.Gosched()
		default:
			u.waiting = true
			u.mu.Unlock()
			<-u.idle
		}
	}
}

// finishUpdates ends the updates of u: when the last bucket was not
// communicated (a failure) it closes the queue and waits for the update
// goroutine; otherwise hand has already waited for every span. When every
// bucket was updated it ends the step. It fills the stats' optimizer figures: Optimizer is the
// update time after the last collective ended.
func (d *DDP[T]) finishUpdates(u *updates, stats *StepStats, commErr error) error {
	settled := u.settled // set by this goroutine (hand)
	if !settled {        // the communication stopped early
		u.close()
		<-u.done
	}
	err := errors.Join(u.worker.err, u.comm.err)
	if settled && u.pending != 0 && err == nil {
		// A collective reported some element twice or never.
		err = fmt.Errorf("ddp: optimizer in backward: the step's updates left %d of its elements over (negative: updated twice)", u.pending)
	}
	stats.OptimizerTotal = u.worker.total + u.comm.total
	end := u.worker.end
	if u.comm.end.After(end) {
		end = u.comm.end
	}
	if !end.IsZero() && !stats.CommEnd.IsZero() {
		stats.Optimizer = max(0, end.Sub(stats.CommEnd))
	}
	if err != nil || commErr != nil {
		// Some spans may be updated and others not: the replicas are
		// unusable until reloaded from a checkpoint, and the optimizer
		// refuses the next BeginStep (the step is still open).
		return errors.Join(err, commErr)
	}
	if stats.Buckets != len(d.buckets) {
		return fmt.Errorf("ddp: optimizer in backward: %d of %d buckets communicated", stats.Buckets, len(d.buckets))
	}
	if err := d.stepper.EndStep(); err != nil {
		return fmt.Errorf("ddp: optimizer in backward: %w", err)
	}
	d.updated = true
	return nil
}
