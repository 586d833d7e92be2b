package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// A rank's two endpoints (Config.Overlap), as package mixed has them:
// one carries the messages with its node's ranks (shared memory), the
// other those with other nodes' ranks (tcp), and package allreduce runs a
// composition's blocks on both at once, from two goroutines
// (pipeline.go: block b crosses between nodes while block b+1 is reduced
// and block b-1 gathered within the node).
//
// The simulator follows that with a clock per endpoint. Between
// SplitClock and JoinClock the rank's calls with its node's ranks go by
// lanes[0] and those with other nodes' ranks by lanes[1], each with its
// own egress (Config.Ports: its own ports), from its own goroutine. Where
// one goroutine waits for the other (block b's across stage for its in
// stage; its out stage for its across stage) the waited-for goroutine
// posts its endpoint's time (PostClock) and the waiting one takes it
// (AwaitClock):
//
//	PostClock(local):   the local (or other) lane's clock t joins the
//	                    other lane's marks, in order
//	AwaitClock(local):  the local (or other) lane waits for its next
//	                    mark t, then clock = max(clock, t)
//	JoinClock:          clock = max of the two; one lane again
//
// So each lane's clock is a function of its own calls, the messages it
// receives and the marks it takes, in program order: deterministic as a
// single clock is. A lane waiting in AwaitClock counts as blocked (for
// deadlock detection and the shared NICs' quiescence): only the other
// lane can release it. Messages between nodes leave through the NIC
// lane's clock (nicLane), the one the shared NICs read.

// overlapConn is a rank's endpoint in a world with Config.Overlap, as
// World.Endpoints hands it out: a *Conn that also says which ranks its
// local endpoint carries, as package mixed's endpoints do (package
// allreduce's localEndpoint, whose presence alone tells a group that its
// transport overlaps, the same on every rank). ConnOf finds the *Conn.
type overlapConn struct{ *Conn }

// LocalEndpointMembers lists the world ranks whose messages go through
// this rank's local endpoint, apart from the others': the ranks of its
// node; nil when the rank is alone on its node (as package mixed).
func (c overlapConn) LocalEndpointMembers() []int {
	if c.LocalSize() < 2 {
		return nil
	}
	lo := c.node * c.world.localSize
	members := make([]int, c.LocalSize())
	for i := range members {
		members[i] = lo + i
	}
	return members
}

// ConnOf is the simulated endpoint c is, or that World.Endpoints wrapped
// in c (Config.Overlap); false if c is neither.
func ConnOf(c transport.Conn) (*Conn, bool) {
	switch c := c.(type) {
	case *Conn:
		return c, true
	case overlapConn:
		return c.Conn, true
	}
	return nil, false
}

// SplitClock gives each of the rank's endpoints a clock of its own, both
// at the rank's clock (see above): from now on calls with its node's
// ranks and calls with other nodes' ranks may come from two goroutines
// at once, one each. Call it with no call of the rank in progress; a
// second call is a no-op.
func (c *Conn) SplitClock() {
	l0, l1 := &c.lanes[0], &c.lanes[1]
	l0.tmu.Lock()
	l1.tmu.Lock()
	c.mu.Lock()
	if !c.split.Load() {
		l1.clock, l1.egressFree = l0.clock, l0.egressFree
		l1.portFree, l1.linkFree = slices.Clone(l0.portFree), slices.Clone(l0.linkFree)
		l1.now.Store(l0.now.Load())
		l0.marks, l1.marks = l0.marks[:0], l1.marks[:0]
		c.split.Store(true)
		if !c.closed {
			c.world.running.Add(1)
		}
	}
	c.mu.Unlock()
	l1.tmu.Unlock()
	l0.tmu.Unlock()
}

// JoinClock makes the rank's clock one again, at the later of its two
// (and each port free at the later of its two times). Call it when
// neither endpoint has a call in progress; without SplitClock it is a
// no-op.
func (c *Conn) JoinClock() {
	l0, l1 := &c.lanes[0], &c.lanes[1]
	l0.tmu.Lock()
	l1.tmu.Lock()
	c.mu.Lock()
	if c.split.Load() {
		t := max(l0.clock, l1.clock)
		l0.egressFree = max(l0.egressFree, l1.egressFree)
		for i := range l0.portFree {
			l0.portFree[i] = max(l0.portFree[i], l1.portFree[i])
		}
		for i := range l0.linkFree {
			l0.linkFree[i] = max(l0.linkFree[i], l1.linkFree[i])
		}
		if l0.portFree == nil && l1.portFree != nil {
			l0.portFree, l0.linkFree = l1.portFree, l1.linkFree
		}
		c.split.Store(false)
		if !c.closed && !l1.blocked {
			c.world.running.Add(-1)
		}
		c.storeClockLocked(l0, t)
	}
	c.mu.Unlock()
	l1.tmu.Unlock()
	l0.tmu.Unlock()
}

// lane is the local endpoint's lane (local) or the other one's.
func (c *Conn) lane(local bool) *lane {
	if local {
		return &c.lanes[0]
	}
	return &c.lanes[1]
}

// PostClock hands the clock of the local endpoint (local), or of the
// other one, to the other endpoint's next AwaitClock. Without a split
// clock it is a no-op.
func (c *Conn) PostClock(local bool) {
	if !c.split.Load() {
		return
	}
	from, to := c.lane(local), c.lane(!local)
	t := from.load()
	c.mu.Lock()
	to.marks = append(to.marks, t)
	if to.blocked && to.waitFrom == waitClock {
		c.unblockLocked(to)
		poke(to.wake)
	}
	c.mu.Unlock()
}

// AwaitClock waits until the other endpoint has posted a time this
// endpoint (local: the local one) has not taken yet, and sets this
// endpoint's clock to at least that time. It fails as a blocked receive
// does (context, close, abort, deadlock, real-time timeout). Without a
// split clock it returns at once.
func (c *Conn) AwaitClock(ctx context.Context, local bool) error {
	if err := c.enter(); err != nil {
		return err
	}
	if !c.split.Load() {
		return nil
	}
	w, ln := c.world, c.lane(local)
	take := func() (float64, bool) { // the caller holds mu
		if len(ln.marks) == 0 {
			return 0, false
		}
		t := ln.marks[0]
		ln.marks = ln.marks[1:]
		return t, true
	}
	c.mu.Lock()
	if t, ok := take(); ok {
		c.mu.Unlock()
		c.setClock(ln, max(ln.load(), t))
		return nil
	}
	c.park(ln, waitClock, transport.Header{}, 0)
	defer ln.timer.Stop()
	for {
		select {
		case <-ln.wake:
			c.mu.Lock()
			if err := ln.deadlock; err != nil { // (a deadlock leaves no mark to take)
				c.mu.Unlock()
				return c.leave(ln, err)
			}
			t, ok := take()
			if ok {
				c.unblockLocked(ln)
			}
			c.mu.Unlock()
			if ok {
				c.setClock(ln, max(ln.load(), t))
				return nil
			}
		case <-ctx.Done():
			return c.leave(ln, ctx.Err())
		case <-c.end.Dead():
			return c.leave(ln, c.end.Err())
		case <-w.aborted:
			return c.leave(ln, c.abortedErr())
		case <-ln.timer.C:
			return c.leave(ln, &transport.TimeoutError{Peer: -1, What: fmt.Sprintf("wait for the %s endpoint's time", map[bool]string{true: "inter-node", false: "intra-node"}[local]), After: w.timeout.String()})
		}
	}
}
