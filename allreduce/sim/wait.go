package sim

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// The waits of a lane: a receive whose message has not come, and how a
// wait counts in the world's running lanes (deadlock detection).

// blockLocked marks a blocked wait of lane ln; the caller holds mu and
// must call checkDeadlock after unlocking if it returns true.
func (c *Conn) blockLocked(ln *lane, from int, h transport.Header, n int) bool {
	ln.blocked, ln.waitFrom, ln.waitH, ln.waitN = true, from, h, n
	ln.deadlock = nil
	if c.closed {
		return false
	}
	return c.world.running.Add(-1) == 0
}

// unblockLocked ends a blocked wait of lane ln; the caller holds mu.
func (c *Conn) unblockLocked(ln *lane) {
	if !ln.blocked {
		return
	}
	ln.blocked, ln.waitFrom = false, waitNone
	if !c.closed {
		c.world.running.Add(1)
	}
}

// park marks lane ln blocked in a wait (blockLocked), unlocks mu, which
// the caller holds, checks for a deadlock if ln was the last running
// lane, and arms ln's real-time timeout, which the caller stops.
func (c *Conn) park(ln *lane, from int, h transport.Header, n int) {
	zero := c.blockLocked(ln, from, h, n)
	c.mu.Unlock()
	if zero {
		c.world.checkDeadlock()
	}
	ln.timer.Reset(c.world.timeout)
}

// leave ends a wait of lane ln that failed with err and returns err.
func (c *Conn) leave(ln *lane, err error) error {
	c.mu.Lock()
	c.unblockLocked(ln)
	ln.deadlock = nil
	c.mu.Unlock()
	return err
}

// next pops the next message from rank from, waiting for it by lane ln
// if need be.
func (c *Conn) next(ctx context.Context, ln *lane, from int, h transport.Header, n int) (message, error) {
	w := c.world
	c.mu.Lock()
	if err := c.verdict; err != nil {
		// Reported since enter looked.
		c.verdict = nil
		c.mu.Unlock()
		return message{}, err
	}
	if m, ok := c.popLocked(from); ok {
		c.mu.Unlock()
		return m, nil
	}
	peer := w.conns[from]
	c.park(ln, from, h, n)
	defer ln.timer.Stop()
	for {
		select {
		case <-ln.wake:
			c.mu.Lock()
			if err := ln.deadlock; err != nil {
				ln.deadlock = nil
				c.unblockLocked(ln)
				c.mu.Unlock()
				return message{}, err
			}
			if err := c.verdict; err != nil {
				c.verdict = nil
				c.unblockLocked(ln)
				c.mu.Unlock()
				return message{}, err
			}
			if m, ok := c.popLocked(from); ok {
				c.unblockLocked(ln)
				c.mu.Unlock()
				return m, nil
			}
			c.mu.Unlock()
		case <-ctx.Done():
			return message{}, c.leave(ln, ctx.Err())
		case <-c.end.Dead():
			return message{}, c.leave(ln, c.end.Err())
		case <-peer.end.Dead():
			if m, ok := c.popAndLeave(ln, from); ok {
				return m, nil
			}
			return message{}, c.leave(ln, w.peerErr(from))
		case <-w.aborted:
			if m, ok := c.popAndLeave(ln, from); ok {
				return m, nil
			}
			return message{}, c.leave(ln, c.abortedErr())
		case <-ln.timer.C:
			return message{}, c.leave(ln, &transport.TimeoutError{Peer: from, What: "recv", After: w.timeout.String()})
		}
	}
}

func (c *Conn) popLocked(from int) (message, bool) {
	q := c.in[from]
	if q == nil {
		return message{}, false
	}
	return q.pop()
}

// popAndLeave ends lane ln's wait with the message if it came after all.
func (c *Conn) popAndLeave(ln *lane, from int) (message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.popLocked(from)
	if ok {
		c.unblockLocked(ln)
		ln.deadlock = nil
	}
	return m, ok
}

// report hands this rank (the sender of a refused message) the mismatch,
// for its blocked receive or its next call.
func (c *Conn) report(err error) {
	c.mu.Lock()
	if c.verdict == nil {
		c.verdict = err
	}
	for i := range c.lanesInUse() {
		ln := &c.lanes[i]
		if ln.blocked && ln.waitFrom >= 0 {
			c.unblockLocked(ln)
			poke(ln.wake)
		}
	}
	c.mu.Unlock()
}
