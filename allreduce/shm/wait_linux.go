//go:build linux

package shm

import (
	"context"
	"runtime"
	"syscall"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// maxSleep bounds one futex sleep, so that a cancelled context (which
// rings no doorbell) is noticed within it.
const maxSleep = 50 * time.Millisecond

// Waiting without a system call, before the yields.
const (
	// ownCorePolls is how many times a call that found nothing steps
	// again at once, when every rank of the host can have a core of its
	// own (Config.Size ≤ runtime.NumCPU()): a step that finds nothing is
	// an atomic load or two, a few microseconds in all, and a peer that
	// is running answers sooner than a yield returns. With more ranks
	// than cores the peer is likely not running, so the call yields at
	// once: polling then only delays the peer (docs/measurements.md has
	// the figures).
	ownCorePolls = 1000
	// clockEvery is how often (in idle iterations) a yielding call reads
	// the clock for its spin deadline and timeout.
	clockEvery = 4
)

// pollsFor is the number of polls before yielding for a world of size
// ranks on this host.
func pollsFor(size int) int {
	if size <= runtime.NumCPU() {
		return ownCorePolls
	}
	return 0
}

// drive runs a send, a receive or both until done: it steps them while
// they move, and waits (waiter) while neither does.
func (c *Conn) drive(ctx context.Context, what string, peer int, s *sendOp, r *recvOp) error {
	w := c.newWaiter(what, peer)
	for {
		prog, done, err := false, true, error(nil)
		if s != nil {
			var p bool
			p, err = s.step()
			prog, done = p, s.done
		}
		if err == nil && r != nil {
			var p bool
			p, err = r.step()
			prog, done = prog || p, done && r.done
		}
		if err != nil || done {
			w.stop()
			return err
		}
		if prog {
			w.moved()
			continue
		}
		// Only the unfinished halves' links matter: a send that is in
		// the ring is done, whatever its receiver does next.
		var l1, l2 *link
		if s != nil && !s.done {
			l1 = s.l
		}
		if r != nil && !r.done {
			l2 = r.l
		}
		if err := w.idle(ctx, l1, l2); err != nil {
			return err
		}
	}
}

// waiter is how a call waits for a peer while nothing moves: it polls
// (ownCorePolls steps, when every rank has a core), then checks the
// call's links, the endpoint, the context and the timeout, and yields the
// core between steps for Config.Spin (to this process's goroutines and to
// other processes in turn), then sleeps on this rank's doorbell
// (futex.go), for at most maxSleep at a time, until a peer rings it. The
// caller steps once between calls to idle and calls moved when a step
// made progress.
type waiter struct {
	c                         *Conn
	what                      string // the call, for its timeout error
	peer                      int    // the peer it waits for, for its timeout error
	idleSince, spinUntil, now time.Time
	armed, lastChance         bool
	snap                      uint32
	polls, idles              int
}

func (c *Conn) newWaiter(what string, peer int) waiter {
	return waiter{c: c, what: what, peer: peer}
}

// stop ends the wait (the call is done or failed).
func (w *waiter) stop() {
	if w.armed {
		w.c.bell.disarm()
		w.armed = false
	}
}

// moved restarts the wait after progress.
func (w *waiter) moved() {
	w.stop()
	w.idleSince = time.Time{}
	w.polls, w.idles = 0, 0
}

// idle waits a little after a step that moved nothing, or fails the call
// (then it has stopped): the links l1 and l2 (either may be nil) failed,
// the endpoint ended, ctx ended or the timeout passed.
func (w *waiter) idle(ctx context.Context, l1, l2 *link) error {
	c := w.c
	if w.polls < c.polls {
		w.polls++
		return nil
	}
	if err := c.checkCall(ctx, l1, l2); err != nil {
		// A peer publishes before it records a status or exits: step
		// once more, so that what it sent first is delivered first.
		if !w.lastChance {
			w.lastChance = true
			return nil
		}
		w.stop()
		return err
	}
	w.lastChance = false
	w.idles++
	if w.idleSince.IsZero() || w.armed || w.idles%clockEvery == 0 {
		w.now = time.Now()
	}
	if w.idleSince.IsZero() {
		w.idleSince, w.spinUntil = w.now, w.now.Add(c.cfg.Spin)
	}
	waited := w.now.Sub(w.idleSince)
	if waited >= c.cfg.Timeout {
		w.stop()
		return &transport.TimeoutError{Peer: w.peer, What: w.what, After: c.cfg.Timeout.String()}
	}
	switch {
	case w.armed:
		d := min(maxSleep, c.cfg.Timeout-waited)
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl))
		}
		c.bell.sleep(w.snap, d)
		w.stop()
	case w.now.Before(w.spinUntil):
		// Alternately to this process's goroutines and to other
		// processes: with more ranks than cores, yielding the core to
		// other processes every time measured slower than alternating,
		// and never yielding it far slower (docs/measurements.md).
		if w.idles%2 == 0 {
			runtime.Gosched()
		} else {
			_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	default:
		w.snap = c.bell.arm() // then step once more before sleeping
		w.armed = true
	}
	return nil
}

// checkCall reports why a call cannot go on: the endpoint closed or
// aborted, the context ended, or a link failed.
func (c *Conn) checkCall(ctx context.Context, l1, l2 *link) error {
	if c.core.End.Ended() {
		return c.core.End.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, l := range [2]*link{l1, l2} {
		if l != nil {
			if err := l.check(); err != nil {
				return err
			}
		}
	}
	return nil
}
