package sim

import (
	"context"
	"math"
	"sync"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Shared NICs (Config.NICs = k ≥ 1): the ranks of a node send their
// inter-node messages through k NICs, local rank i through NIC i mod k of
// its node, and a NIC carries one message at a time for the message's
// n·β on the inter-node link. A message is ready at the time the send
// rule would have started it (the rank's clock, its egress or port and
// link free); it starts at the later of its ready time and the time its
// NIC is free, and occupies the NIC until start + n·β.
//
// The NIC serves its messages in the order of their ready times (then of
// their ranks), whatever order the goroutines reach it in: that is what
// keeps the virtual times deterministic. A request is granted when no
// rank of its NIC can still ask for an earlier slot, which holds
//
//   - at once, when every other rank of the NIC has a later request
//     waiting, has closed, or has a clock past the ready time (a clock
//     only grows, and a rank's requests are ready no earlier than its
//     clock); or
//   - when the whole world is quiescent (every open rank blocked in a
//     receive, AlignClocks or a NIC): the earliest waiting request of
//     the world is then granted, since anything that happens later is
//     caused by a waiting request's message, which arrives no earlier
//     than that request's ready time.
//
// So a rank that stops calling into the simulator without blocking in
// it (or closing) holds up its NIC's other ranks until the real-time
// timeout: end each rank's program with AlignClocks or Close. Ingress is
// not shared: a node receives any number of messages at once.
type nicSet struct {
	mu      sync.Mutex
	free    []float64 // when each NIC is free again, by NIC
	waiting [][]*Conn // the ranks with a request waiting, by NIC
	members [][]*Conn // the ranks that send through each NIC
	pending int       // waiting requests in all
}

// nicRequest is a rank's message waiting for its NIC, guarded by
// nicSet.mu.
type nicRequest struct {
	lane      *lane // the lane that sends it
	ready, tx float64
	waiting   bool
	granted   bool
	start     float64
}

// newNICSet makes the NICs of w's nodes, k per node, and assigns each
// rank to its NIC (Conn.nic).
func newNICSet(w *World, k int) *nicSet {
	nodes := (w.size + w.localSize - 1) / w.localSize
	s := &nicSet{free: make([]float64, nodes*k), waiting: make([][]*Conn, nodes*k), members: make([][]*Conn, nodes*k)}
	for _, c := range w.conns {
		c.nic = c.node*k + c.LocalRank()%k
		s.members[c.nic] = append(s.members[c.nic], c)
	}
	return s
}

// crosses reports whether a message from c to rank to goes through c's
// NIC.
func (s *nicSet) crosses(c *Conn, to int) bool {
	return s != nil && c.world.node(to) != c.node
}

// acquire waits until c's NIC takes a message ready at ready that
// occupies it for tx seconds, and returns the message's start. While it
// waits the rank counts as blocked (for quiescence and deadlock
// detection); it fails like a blocked receive does (context, close,
// abort, real-time timeout).
func (s *nicSet) acquire(ctx context.Context, c *Conn, ln *lane, ready, tx float64) (float64, error) {
	w := c.world
	s.mu.Lock()
	c.nicReq = nicRequest{lane: ln, ready: ready, tx: tx, waiting: true}
	s.waiting[c.nic] = append(s.waiting[c.nic], c)
	s.pending++
	s.grantSafe(c.nic)
	if c.nicReq.granted {
		start := c.nicReq.start
		s.mu.Unlock()
		return start, nil
	}
	c.mu.Lock()
	zero := c.blockLocked(ln, waitNIC, transport.Header{}, 0)
	c.mu.Unlock()
	s.mu.Unlock()
	if zero {
		w.checkDeadlock()
	}
	ln.timer.Reset(w.timeout)
	defer ln.timer.Stop()
	for {
		select {
		case <-ln.wake:
			s.mu.Lock()
			granted, start := c.nicReq.granted, c.nicReq.start
			s.mu.Unlock()
			if granted {
				return start, nil // grant unblocked the rank
			}
		case <-ctx.Done():
			return 0, c.leave(ln, s.withdraw(c, ctx.Err()))
		case <-c.end.Dead():
			return 0, c.leave(ln, s.withdraw(c, c.end.Err()))
		case <-w.aborted:
			return 0, c.leave(ln, s.withdraw(c, c.abortedErr()))
		case <-ln.timer.C:
			return 0, c.leave(ln, s.withdraw(c, &transport.TimeoutError{Peer: -1, What: "wait for the node's NIC", After: w.timeout.String()}))
		}
	}
}

// withdraw takes back c's waiting request, if it was not granted
// meanwhile, lets the NIC's other requests go on, and returns err.
func (s *nicSet) withdraw(c *Conn, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.nicReq.waiting {
		s.remove(c)
		s.grantSafe(c.nic)
	}
	return err
}

// remove drops c from its NIC's waiting requests.
func (s *nicSet) remove(c *Conn) {
	q := s.waiting[c.nic]
	for i, x := range q {
		if x == c {
			s.waiting[c.nic] = append(q[:i], q[i+1:]...)
			break
		}
	}
	c.nicReq.waiting = false
	s.pending--
}

// earliest is the waiting request of NIC nic that comes first (the
// earliest ready time, then the lowest rank), or nil.
func (s *nicSet) earliest(nic int) *Conn {
	var first *Conn
	for _, c := range s.waiting[nic] {
		if first == nil || before(c, first) {
			first = c
		}
	}
	return first
}

// before orders waiting requests: by ready time, then by rank.
func before(a, b *Conn) bool {
	if a.nicReq.ready != b.nicReq.ready {
		return a.nicReq.ready < b.nicReq.ready
	}
	return a.rank < b.rank
}

// grantSafe grants NIC nic's earliest requests while no other rank of the
// NIC can still ask for an earlier slot. The caller holds mu.
func (s *nicSet) grantSafe(nic int) {
	for {
		first := s.earliest(nic)
		if first == nil || !s.safe(first) {
			return
		}
		s.grant(first)
	}
}

// safe reports whether every other rank of first's NIC will only ask for
// slots after first's: it waits with a later request, has ended, or its
// clock (a lower bound of its next request's ready time) is past.
func (s *nicSet) safe(first *Conn) bool {
	t := first.nicReq.ready
	for _, q := range s.members[first.nic] {
		if q == first || q.nicReq.waiting || q.end.Ended() {
			continue
		}
		if c := q.publishedClock(); c < t || (c == t && q.rank < first.rank) {
			return false
		}
	}
	return true
}

// grant gives c's request its slot and wakes c. The caller holds mu.
func (s *nicSet) grant(c *Conn) {
	s.remove(c)
	r := &c.nicReq
	r.start = math.Max(r.ready, s.free[c.nic])
	s.free[c.nic] = r.start + r.tx
	r.granted = true
	// The rank's clock will be at least the message's ready time (Ports
	// ≥ 1: it goes on then) or its end (Ports 0: it is busy until then):
	// a lower bound of its next request's, published for the NIC's other
	// requests now.
	if c.world.cfg.Ports == 0 {
		c.publish(r.start + r.tx)
	} else {
		c.publish(r.ready)
	}
	ln := r.lane
	c.mu.Lock()
	blocked := ln.blocked
	c.unblockLocked(ln)
	c.mu.Unlock()
	if blocked {
		poke(ln.wake) // else granted as it asked, in acquire: nothing to wake
	}
}

// ended lets the requests of c's NIC go on once c has closed or aborted.
func (s *nicSet) ended(c *Conn) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.grantSafe(c.nic)
	s.mu.Unlock()
}

// grantAtQuiescence grants the world's earliest waiting request if every
// open rank is blocked, and reports whether requests were waiting (then
// the world is not deadlocked: a granted rank goes on).
func (s *nicSet) grantAtQuiescence(w *World) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 {
		return false
	}
	if w.running.Load() != 0 {
		return true
	}
	var first *Conn
	for nic := range s.waiting {
		if c := s.earliest(nic); c != nil && (first == nil || before(c, first)) {
			first = c
		}
	}
	s.grant(first)
	s.grantSafe(first.nic)
	return true
}
