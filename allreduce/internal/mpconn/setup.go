package mpconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Setup is the state one Dial's goroutines share while the world forms:
// the context that ends them, the connections whose handshakes are under
// way (closed by Stop), the ranks admitted so far, and the first fatal
// error. C is the transport's connection type.
//
// Setup's mutex (Lock, Unlock) guards its own state, and may guard the
// transport's beside it (the methods named ...Locked expect it held).
type Setup[C interface {
	comparable
	io.Closer
}] struct {
	Ctx    context.Context
	cancel context.CancelFunc
	WG     sync.WaitGroup // the dialers, the acceptor and its handshakes

	sync.Mutex
	stopped  bool
	inflight map[C]struct{}
	admitted []bool

	fatal chan error
}

// NewSetup is the state of a Dial in a world of size ranks, whose
// goroutines end with ctx or Stop.
func NewSetup[C interface {
	comparable
	io.Closer
}](ctx context.Context, size int) *Setup[C] {
	s := &Setup[C]{
		inflight: make(map[C]struct{}),
		admitted: make([]bool, size),
		fatal:    make(chan error, 1),
	}
	s.Ctx, s.cancel = context.WithCancel(ctx)
	return s
}

// Fail records err as the reason Dial fails, unless one is recorded.
func (s *Setup[C]) Fail(err error) {
	select {
	case s.fatal <- err:
	default:
	}
}

// Fatal delivers the error of Fail.
func (s *Setup[C]) Fatal() <-chan error { return s.fatal }

// Track adds c to the connections Stop closes; false (c is not tracked)
// once stopped.
func (s *Setup[C]) Track(c C) bool {
	s.Lock()
	defer s.Unlock()
	return s.TrackLocked(c)
}

// TrackLocked is Track with the mutex held.
func (s *Setup[C]) TrackLocked(c C) bool {
	if s.stopped {
		return false
	}
	s.inflight[c] = struct{}{}
	return true
}

// Untrack forgets c.
func (s *Setup[C]) Untrack(c C) {
	s.Lock()
	s.UntrackLocked(c)
	s.Unlock()
}

// UntrackLocked is Untrack with the mutex held.
func (s *Setup[C]) UntrackLocked(c C) { delete(s.inflight, c) }

// StoppedLocked reports whether Stop has run; the mutex is held.
func (s *Setup[C]) StoppedLocked() bool { return s.stopped }

// Claim admits rank from unless it is admitted already (another process
// claiming the same rank); it reports whether it did.
func (s *Setup[C]) Claim(from int) bool {
	s.Lock()
	defer s.Unlock()
	if s.admitted[from] {
		return false
	}
	s.admitted[from] = true
	return true
}

// Release undoes Claim(from), for a connection that failed after it.
func (s *Setup[C]) Release(from int) {
	s.Lock()
	s.admitted[from] = false
	s.Unlock()
}

// HandshakeDeadline is when a handshake starting now must be over: after
// timeout, or when Ctx ends if that is sooner.
func (s *Setup[C]) HandshakeDeadline(timeout time.Duration) time.Time {
	d := time.Now().Add(timeout)
	if dl, ok := s.Ctx.Deadline(); ok && dl.Before(d) {
		return dl
	}
	return d
}

// Stop ends Ctx and the listener ln, closes every tracked connection,
// and waits for WG.
func (s *Setup[C]) Stop(ln io.Closer) {
	s.cancel()
	_ = ln.Close()
	s.Lock()
	s.stopped = true
	for c := range s.inflight {
		_ = c.Close()
	}
	s.Unlock()
	s.WG.Wait()
}

// Gather takes n values from est, handing each to add, and returns nil;
// or, first, an error from fatal or fails (a nil channel: none), or
// timedOut's error once ctx ends. Every every (if positive) while it
// waits, it calls tick, on its own goroutine (so tick may read what add
// writes).
func Gather[T any](ctx context.Context, n int, est <-chan T, add func(T), fatal, fails <-chan error, timedOut func() error,
	every time.Duration, tick func()) error {
	var ticks <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		ticks = t.C
	}
	for got := 0; got < n; {
		select {
		case <-ticks:
			tick()
		case v := <-est:
			add(v)
			got++
		case err := <-fatal:
			return err
		case err := <-fails:
			return err
		case <-ctx.Done():
			return timedOut()
		}
	}
	return nil
}

// Drain empties ch, handing each value left to f (connections that
// formed too late, after Stop).
func Drain[T any](ch <-chan T, f func(T)) {
	for {
		select {
		case v := <-ch:
			f(v)
		default:
			return
		}
	}
}

// Missing lists, as "1, 3", the ranks other than rank whose link is
// still the zero L.
func Missing[L comparable](links []L, rank int) string {
	var zero L
	var missing []string
	for q, l := range links {
		if l == zero && q != rank {
			missing = append(missing, strconv.Itoa(q))
		}
	}
	return strings.Join(missing, ", ")
}

// Redial calls try until it reports done, waiting between calls: first,
// doubling up to a second, and first again after a call that reports
// reset (it reached the peer, whose handshake failed). When ctx ends
// first, Redial returns ctx's error and the last call's error.
func Redial(ctx context.Context, first time.Duration, try func() (done, reset bool, err error)) (ctxErr, last error) {
	backoff := first
	for {
		done, reset, err := try()
		if done {
			return nil, nil
		}
		last = err
		if reset {
			backoff = first
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err(), last
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// LookUp gets what rank q published in store under key (what names it in
// the error: "address", "socket"). When that fails it records the failure
// with Fail, unless Dial is stopping anyway, and returns false.
func (s *Setup[C]) LookUp(store rendezvous.Store, key string, q int, what string) ([]byte, bool) {
	v, err := store.Get(s.Ctx, key)
	if err != nil {
		if s.Ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
			s.Fail(fmt.Errorf("looking up rank %d's %s: %w", q, what, err))
		}
		return nil, false
	}
	return v, true
}

// Form forms the world: accept runs on one goroutine and dial(q) on one
// for each rank q below rank (higher ranks dial lower ones), all counted
// in WG; then wait runs, and stop (which calls Stop) whatever wait
// returns. Form returns wait's error.
func (s *Setup[C]) Form(rank int, accept func(), dial func(q int), wait func() error, stop func()) error {
	s.WG.Add(1)
	go func() {
		defer s.WG.Done()
		accept()
	}()
	for q := 0; q < rank; q++ {
		s.WG.Add(1)
		go func() {
			defer s.WG.Done()
			dial(q)
		}()
	}
	err := wait()
	stop()
	return err
}
