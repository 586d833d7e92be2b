package ddp

import (
	"math"
	"time"
)

// Observer is told when each bucket of a synchronised Run is complete and
// when its collective ran (WithObserver), for timelines. BucketReady runs
// on the machine's goroutine inside the gradient hook, the others on the
// goroutine that communicates the bucket (the communication goroutine, or
// Run's for the last bucket; one call at a time, in bucket order); all
// must return quickly.
type Observer interface {
	// BucketReady: bucket b (bytes of gradients) is complete at t and
	// handed to communication.
	BucketReady(b, bytes int, t time.Time)
	// BucketReduced: bucket b's collective (its name: "allreduce ring",
	// "reduce-scatter", ...) ran from start to end; err is its error.
	BucketReduced(b, bytes int, collective string, start, end time.Time, err error)
}

// PhaseObserver is an Observer that is also told the phases of a bucket's
// collective where ddp runs them itself (the last bucket's ring as a
// reduce-scatter then an all-gather).
type PhaseObserver interface {
	Observer
	BucketPhase(b int, phase string, start, end time.Time)
}

// WithObserver reports every synchronised Run's buckets to o.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// WithCollectiveName names the bucket collective in what the Observer is
// told (zero's reduce-scatter); by default "allreduce <algorithm>" or
// "custom".
func WithCollectiveName(name string) Option { return func(c *config) { c.collectiveName = name } }

// Observer is the observer WithObserver gave (nil: none), for wrappers
// such as zero that report their own collectives to it.
func (d *DDP[T]) Observer() Observer { return d.cfg.observer }

// WithArrivalStamps makes the agreement (WithAgreement) also carry when
// each rank handed in its last bucket (its backward pass done: the moment
// from which the step's last collective waits for it alone; the
// communication of earlier buckets does not delay it), read on now, a clock in
// microseconds that every rank shares (rank 0's, each rank's offset from
// it removed): every synchronised Run then knows which rank arrived last
// and how long after the one before it (Agreement.Last, Lag). Each rank
// writes its stamp into its own slots of the values (three per rank, 20
// bits each, exact in float32) and zeros elsewhere, so the average times
// the world size gives every rank every stamp.
func WithArrivalStamps(now func() int64) Option { return func(c *config) { c.stampNow = now } }

// stampSlots is the number of agreement values per rank for a stamp.
const stampSlots = 3

const stampBits = 20

// writeStamp writes this rank's stamp now into its slots (the others 0).
func (d *DDP[T]) writeStamp() {
	s := d.extras[agreementValues:]
	clear(s)
	u := d.cfg.stampNow()
	if u < 0 {
		u = 0
	}
	const mask = 1<<stampBits - 1
	r := d.group.Rank() * stampSlots
	s[r] = T(u & mask)
	s[r+1] = T((u >> stampBits) & mask)
	s[r+2] = T(u >> (2 * stampBits))
}

// settleStamps decodes every rank's stamp from the averaged slots and
// finds the last arrival.
func (d *DDP[T]) settleStamps() {
	s := d.extras[agreementValues:]
	n := d.group.Size()
	dec := func(x T) int64 { return int64(math.Round(float64(x) * float64(n))) }
	last, lastAt, prevAt := -1, int64(math.MinInt64), int64(math.MinInt64)
	for r := range n {
		at := dec(s[r*stampSlots]) | dec(s[r*stampSlots+1])<<stampBits | dec(s[r*stampSlots+2])<<(2*stampBits)
		d.arrivals[r] = at
		switch {
		case at > lastAt:
			prevAt = lastAt
			last, lastAt = r, at
		case at > prevAt:
			prevAt = at
		}
	}
	d.agreed.Stamped = true
	d.agreed.Last = last
	if n > 1 {
		d.agreed.Lag = time.Duration(lastAt-prevAt) * time.Microsecond
	}
}

// Arrivals are the stamps of the last synchronised Run (WithArrivalStamps),
// by rank, in microseconds on the shared clock; nil without stamps.
func (d *DDP[T]) Arrivals() []int64 {
	if d.arrivals == nil {
		return nil
	}
	return append([]int64(nil), d.arrivals...)
}
