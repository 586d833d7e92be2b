package trace

import (
	"strconv"
	"sync"
	"time"
)

// Thread is a track within a rank: the "tid" of its events.
type Thread int

// The threads of a rank.
const (
	Compute Thread = 1 // forward, backward, optimizer, evaluation, checkpoints
	Comm    Thread = 2 // collectives
)

func (t Thread) String() string {
	switch t {
	case Compute:
		return "compute"
	case Comm:
		return "communication"
	}
	return "thread " + strconv.Itoa(int(t))
}

// DefaultMaxEvents is the number of events a Recorder keeps; later ones
// are counted as dropped (Dropped).
const DefaultMaxEvents = 1 << 20

// maxArgs is the number of arguments an event carries.
const maxArgs = 4

// Arg is one argument of an event: a number or a string.
type Arg struct {
	Key string
	Str string
	Num float64
	str bool
}

// Int is a numeric argument.
func Int(key string, v int64) Arg { return Arg{Key: key, Num: float64(v)} }

// Float is a numeric argument.
func Float(key string, v float64) Arg { return Arg{Key: key, Num: v} }

// Str is a string argument.
func Str(key, v string) Arg { return Arg{Key: key, Str: v, str: true} }

// event is one recorded event; times are nanoseconds since the
// recorder's start.
type event struct {
	ph        byte // 'X' or 'i'
	tid       Thread
	cat, name string
	ts, dur   int64
	nargs     int
	args      [maxArgs]Arg
}

// Recorder collects one rank's events. Its methods are safe for
// concurrent use; on a nil *Recorder they do nothing and allocate
// nothing.
type Recorder struct {
	rank  int
	start time.Time // monotonic base of the events' times

	mu      sync.Mutex
	offset  time.Duration // this rank's clock minus rank 0's (SetOffset)
	chunks  [][]event     // events in chunks of chunkEvents: appending never copies
	n       int           // events kept
	max     int
	dropped int
}

// NewRecorder starts recording rank's events.
func NewRecorder(rank int) *Recorder {
	return &Recorder{rank: rank, start: time.Now(), max: DefaultMaxEvents}
}

// Rank is the rank the recorder belongs to.
func (r *Recorder) Rank() int {
	if r == nil {
		return -1
	}
	return r.rank
}

// SetOffset sets how far this rank's clock is ahead of the reference
// clock (rank 0's; see SyncClock): events are written at their time minus
// offset.
func (r *Recorder) SetOffset(offset time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.offset = offset
	r.mu.Unlock()
}

// SetMaxEvents bounds the events kept (DefaultMaxEvents by default).
func (r *Recorder) SetMaxEvents(n int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.max = n
	r.mu.Unlock()
}

// Dropped is the number of events not kept because of the bound.
func (r *Recorder) Dropped() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Len is the number of events kept.
func (r *Recorder) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// chunkEvents is the number of events per chunk.
const chunkEvents = 1024

func (r *Recorder) add(e event) {
	r.mu.Lock()
	if r.n < r.max {
		if len(r.chunks) == 0 || len(r.chunks[len(r.chunks)-1]) == chunkEvents {
			r.chunks = append(r.chunks, make([]event, 0, chunkEvents))
		}
		last := &r.chunks[len(r.chunks)-1]
		*last = append(*last, e)
		r.n++
	} else {
		r.dropped++
	}
	r.mu.Unlock()
}

// since is t's time on the recorder's monotonic clock.
func (r *Recorder) since(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Span is an event in progress (Begin): add arguments, then End it. It is
// a value: passing and copying it costs no allocation.
type Span struct {
	r     *Recorder
	tid   Thread
	cat   string
	name  string
	start int64
	nargs int
	args  [maxArgs]Arg
}

// Begin starts a span named name in category cat on thread tid, now.
func (r *Recorder) Begin(tid Thread, cat, name string) Span {
	if r == nil {
		return Span{}
	}
	return Span{r: r, tid: tid, cat: cat, name: name, start: r.since(time.Now())}
}

// BeginAt is Begin at time t.
func (r *Recorder) BeginAt(tid Thread, cat, name string, t time.Time) Span {
	if r == nil {
		return Span{}
	}
	return Span{r: r, tid: tid, cat: cat, name: name, start: r.since(t)}
}

// With adds an argument (at most four; more are ignored).
func (s Span) With(a Arg) Span {
	if s.r != nil && s.nargs < maxArgs {
		s.args[s.nargs] = a
		s.nargs++
	}
	return s
}

// Int adds a numeric argument.
func (s Span) Int(key string, v int64) Span {
	if s.r == nil {
		return s
	}
	return s.With(Int(key, v))
}

// Str adds a string argument.
func (s Span) Str(key, v string) Span {
	if s.r == nil {
		return s
	}
	return s.With(Str(key, v))
}

// End records the span, ending now.
func (s Span) End() {
	if s.r == nil {
		return
	}
	s.EndAt(time.Now())
}

// EndAt records the span, ending at t.
func (s Span) EndAt(t time.Time) {
	if s.r == nil {
		return
	}
	end := s.r.since(t)
	s.r.add(event{ph: 'X', tid: s.tid, cat: s.cat, name: s.name, ts: s.start, dur: max(0, end-s.start), nargs: s.nargs, args: s.args})
}

// Instant records an instant event now; a is an optional argument (the
// zero Arg: none).
func (r *Recorder) Instant(tid Thread, cat, name string, a Arg) {
	if r == nil {
		return
	}
	r.InstantAt(tid, cat, name, a, time.Now())
}

// InstantAt records an instant event at t.
func (r *Recorder) InstantAt(tid Thread, cat, name string, a Arg, t time.Time) {
	if r == nil {
		return
	}
	e := event{ph: 'i', tid: tid, cat: cat, name: name, ts: r.since(t)}
	if a.Key != "" {
		e.args[0], e.nargs = a, 1
	}
	r.add(e)
}

// Complete records a span from start to end with arguments (a convenience
// for code that measured both times already).
func (r *Recorder) Complete(tid Thread, cat, name string, start, end time.Time, args ...Arg) {
	if r == nil {
		return
	}
	s := r.BeginAt(tid, cat, name, start)
	for _, a := range args {
		s = s.With(a)
	}
	s.EndAt(end)
}

func noop() {}

// Span starts a span and returns the function that ends it: the
// convenient form, which allocates a closure when recording (Begin/End
// does not).
func (r *Recorder) Span(tid Thread, name string, args ...Arg) (end func()) {
	if r == nil {
		return noop
	}
	s := r.Begin(tid, "", name)
	for _, a := range args {
		s = s.With(a)
	}
	return s.End
}

// all iterates over the events kept, in order; r.mu must be held.
func (r *Recorder) all() func(yield func(int, event) bool) {
	return func(yield func(int, event) bool) {
		i := 0
		for _, c := range r.chunks {
			for _, e := range c {
				if !yield(i, e) {
					return
				}
				i++
			}
		}
	}
}
