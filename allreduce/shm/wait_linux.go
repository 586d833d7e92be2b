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

// drive runs a send, a receive or both until done: it steps them while
// they move; when neither moves it checks the call's links, the
// endpoint, the context and the timeout, then polls for Config.Spin,
// yielding the core between polls (to this process's goroutines and to
// other processes in turn), then sleeps on this rank's doorbell
// (futex.go), for at most maxSleep at a time, until a peer rings it.
func (c *Conn) drive(ctx context.Context, what string, peer int, s *sendOp, r *recvOp) error {
	var (
		idleSince, spinUntil time.Time
		armed, lastChance    bool
		snap                 uint32
	)
	disarm := func() {
		if armed {
			c.bell.disarm()
			armed = false
		}
	}
	for i := 0; ; i++ {
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
			disarm()
			return err
		}
		if prog {
			disarm()
			idleSince = time.Time{}
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
		if err := c.checkCall(ctx, l1, l2); err != nil {
			// A peer publishes before it records a status or exits: step
			// once more, so that what it sent first is delivered first.
			if !lastChance {
				lastChance = true
				continue
			}
			disarm()
			return err
		}
		lastChance = false
		now := time.Now()
		if idleSince.IsZero() {
			idleSince, spinUntil = now, now.Add(c.cfg.Spin)
		}
		idle := now.Sub(idleSince)
		if idle >= c.cfg.Timeout {
			disarm()
			return &transport.TimeoutError{Peer: peer, What: what, After: c.cfg.Timeout.String()}
		}
		switch {
		case armed:
			d := min(maxSleep, c.cfg.Timeout-idle)
			if dl, ok := ctx.Deadline(); ok {
				d = min(d, time.Until(dl))
			}
			c.bell.sleep(snap, d)
			disarm()
		case now.Before(spinUntil):
			if i%2 == 0 {
				runtime.Gosched()
			} else {
				_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
		default:
			snap = c.bell.arm() // then step once more before sleeping
			armed = true
		}
	}
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
