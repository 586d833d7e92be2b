package sim

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// The calls that move messages: Send, Recv and Exchange, each timed by
// the lane of its peer (laneFor).

// Send posts p to rank to: eagerly, so it returns at once (the payload is
// copied unless it is virtual). The clock advances by the time p occupies
// this rank's egress port; with Config.Ports ≥ 1, to the time a port
// takes p.
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if err := c.enter(to); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ln := c.laneFor(to)
	ln.tmu.Lock()
	defer ln.tmu.Unlock()
	alpha := 1.0
	if c.world.cfg.LoneAlpha > 0 {
		alpha = c.world.cfg.LoneAlpha // a lone send: Config.LoneAlpha
	}
	done, err := c.post(ctx, ln, to, h, p, ln.clock, 1, alpha)
	if err != nil {
		return err
	}
	c.storeClockLocked(ln, done)
	return nil
}

// Recv receives the next message from rank from into sink. The clock
// becomes the later of itself and the message's arrival, plus n·Gamma if
// sink reduces (is not a transport.Placer).
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	if err := c.enter(from); err != nil {
		return err
	}
	if err := checkRecv(n, sink); err != nil {
		return err
	}
	ln := c.laneFor(from)
	done, err := c.receive(ctx, ln, from, h, n, sink, ln.load())
	if err != nil {
		return err
	}
	c.setClock(ln, done)
	return nil
}

// Exchange sends sp to rank to and receives n bytes from rank from, both
// starting at the current clock; the clock becomes the later of the two
// ends. While the clock is split (SplitClock) to and from must be on the
// same side: both on this rank's node or both off it.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if err := c.enter(to, from); err != nil {
		return err
	}
	if err := checkRecv(n, sink); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ln := c.laneFor(to)
	if c.laneFor(from) != ln {
		return fmt.Errorf("sim rank %d: an exchange with rank %d and rank %d, one on this rank's node and one off it, while its clock is split: %w", c.rank, to, from, transport.ErrInvalid)
	}
	ln.tmu.Lock()
	t := ln.clock
	work := 1.0
	if to == from && c.world.cfg.ExchangeWork > 0 {
		work = c.world.cfg.ExchangeWork // a pairwise exchange: Config.ExchangeWork
	}
	sent, err := c.post(ctx, ln, to, sh, sp, t, work, 1)
	ln.tmu.Unlock()
	if err != nil {
		return err
	}
	recvd, err := c.receive(ctx, ln, from, rh, n, sink, t)
	if err != nil {
		return err
	}
	c.setClock(ln, max(sent, recvd))
	return nil
}

func checkRecv(n int, sink transport.Sink) error {
	if n < 0 {
		return fmt.Errorf("sim: receive of %d bytes: %w", n, transport.ErrInvalid)
	}
	if sink == nil && n > 0 {
		return fmt.Errorf("sim: receive of %d bytes into a nil sink: %w", n, transport.ErrInvalid)
	}
	return nil
}

// post queues a copy of p (or, if p is virtual, its length) for rank to,
// sent at clock t by lane ln, and returns when the sender may go on: when
// the egress port is done with it, or with Config.Ports ≥ 1 when a port
// took it. A message between nodes with Config.NICs set first waits for
// its NIC (nic.go), which may delay its start. It arrives α·f·alpha
// after its transfer (alpha: Config.LoneAlpha for a lone send, else 1).
// Its work (Config.Cores) is n·β·f times work. The caller holds ln.tmu.
func (c *Conn) post(ctx context.Context, ln *lane, to int, h transport.Header, p []byte, t, work, alpha float64) (float64, error) {
	w := c.world
	l, f := w.cost(c.rank, to)
	tx := transfer(l, len(p), f)
	start, port := max(t, ln.egressFree), -1
	if k := w.cfg.Ports; k > 0 {
		if ln.portFree == nil {
			ln.portFree, ln.linkFree = make([]float64, k), make([]float64, w.size)
		}
		port = 0 // the port free first, the lowest on a tie
		for i, x := range ln.portFree {
			if x < ln.portFree[port] {
				port = i
			}
		}
		start = max(t, ln.portFree[port], ln.linkFree[to])
	}
	ready := start
	if w.nics.crosses(c, to) {
		var err error
		if start, err = w.nics.acquire(ctx, c, ln, ready, tx); err != nil {
			return 0, err
		}
	}
	m := message{h: h, n: len(p), arrival: start + l.Alpha*f*alpha + tx}
	if w.arena.contains(p) {
		m.virtual = true
	} else if len(p) > 0 {
		m.buf = getBuf(len(p))
		copy(*m.buf, p)
	}
	if err := w.conns[to].deliver(c.rank, m); err != nil {
		return 0, err
	}
	collective := 0
	if w.cfg.CollectiveBytes != nil {
		collective = w.cfg.CollectiveBytes(h)
	}
	c.addWork(float64(len(p))*l.Beta*f*work, collective) // at the large-message rate: Config.Cores
	if port >= 0 {
		ln.portFree[port], ln.linkFree[to] = start+tx, start+tx
		return ready, nil
	}
	ln.egressFree = start + tx
	return ln.egressFree, nil
}

// deliver queues m from rank from in this rank's inbox and wakes the lane
// that waits for it.
func (c *Conn) deliver(from int, m message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		m.release()
		return c.world.peerErr(c.rank)
	}
	q := c.in[from]
	if q == nil {
		q = &fifo{}
		c.in[from] = q
	}
	q.push(m)
	for i := range c.lanesInUse() {
		ln := &c.lanes[i]
		if ln.blocked && ln.waitFrom == from {
			c.unblockLocked(ln)
			poke(ln.wake)
		}
	}
	return nil
}

// receive takes the next message from rank from by lane ln, started at
// clock t, and returns the clock at which it is done.
func (c *Conn) receive(ctx context.Context, ln *lane, from int, h transport.Header, n int, sink transport.Sink, t float64) (float64, error) {
	m, err := c.next(ctx, ln, from, h, n)
	if err != nil {
		return 0, err
	}
	if m.h != h || m.n != n {
		m.release()
		c.world.conns[from].report(&transport.MismatchError{Rank: from, Peer: c.rank, Local: m.h, LocalBytes: m.n, Remote: h, RemoteBytes: n})
		return 0, &transport.MismatchError{Rank: c.rank, Peer: from, Local: h, LocalBytes: n, Remote: m.h, RemoteBytes: m.n}
	}
	done := max(t, m.arrival)
	placer, isPlacer := sink.(transport.Placer)
	if !isPlacer {
		reduce := float64(n) * c.world.cfg.Gamma
		done += reduce
		c.addWork(reduce, 0)
	}
	if m.buf != nil {
		if isPlacer {
			if dst := placer.Place(n); !c.world.arena.contains(dst) {
				copy(dst, *m.buf)
			}
		} else {
			sink.Consume(0, *m.buf)
		}
		m.release()
	}
	return done, nil
}
