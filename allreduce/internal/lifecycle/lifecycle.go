// Package lifecycle is the end of a transport endpoint's life, which
// every transport (inproc, sim, tcp, shm) handles the same way: Close or
// Abort (or a test's kill) ends it once, with a cause; from then on its
// calls fail with transport.ErrClosed (after Close) or with the cause of
// the abort, and goroutines waiting on it are woken by a closed channel.
package lifecycle

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// End is the end state of one endpoint.
type End struct {
	name  string // the transport, for Err: "tcp", "shm", "inproc", "sim"
	rank  int
	once  sync.Once
	ended atomic.Bool
	dead  chan struct{}
	cause error // why it ended; written before ended and dead
}

// New is the end state of rank's endpoint of transport name, not ended.
func New(name string, rank int) *End {
	return &End{name: name, rank: rank, dead: make(chan struct{})}
}

// Dead is closed when the endpoint ends.
func (e *End) Dead() <-chan struct{} { return e.dead }

// Ended reports whether the endpoint has ended (without a channel
// operation, for hot paths).
func (e *End) Ended() bool { return e.ended.Load() }

// Cause is why the endpoint ended: transport.ErrClosed after Close, the
// abort's cause otherwise. Read it only once Dead is closed or Ended
// holds.
func (e *End) Cause() error { return e.cause }

// Finish ends the endpoint with cause, once: the first call records the
// cause, runs before (if not nil), marks the endpoint ended and closes
// Dead, then runs after (if not nil). Later calls do nothing.
func (e *End) Finish(cause error, before, after func()) {
	e.once.Do(func() {
		e.cause = cause
		if before != nil {
			before()
		}
		e.ended.Store(true)
		close(e.dead)
		if after != nil {
			after()
		}
	})
}

// Err is the error of a call on the ended endpoint: "<name> rank <r>:"
// wrapping transport.ErrClosed after Close, "<name> rank <r> aborted:"
// wrapping the cause after an abort.
func (e *End) Err() error {
	if errors.Is(e.cause, transport.ErrClosed) {
		return fmt.Errorf("%s rank %d: %w", e.name, e.rank, transport.ErrClosed)
	}
	return fmt.Errorf("%s rank %d aborted: %w", e.name, e.rank, e.cause)
}

// AbortCause is the cause an Abort(cause) records: cause, or "aborted"
// when it is nil.
func AbortCause(cause error) error {
	if cause == nil {
		return errors.New("aborted")
	}
	return cause
}
