package sim

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Aligning the clocks: a barrier of zero virtual cost (AlignClocks).

// AlignClocks is a barrier of zero virtual cost over every rank of the
// world: it waits (in real time) until every rank has called it, then sets
// every rank's clock to the latest of their clocks (with Config.Cores, at
// least the cores bound: coresBound). It can be called any
// number of times. It fails if a rank closed or aborted.
func (c *Conn) AlignClocks(ctx context.Context) error {
	if err := c.enter(); err != nil {
		return err
	}
	w := c.world
	if c.split.Load() {
		return fmt.Errorf("sim rank %d: AlignClocks while the rank's clock is split (between SplitClock and JoinClock): %w", c.rank, transport.ErrInvalid)
	}
	ln := &c.lanes[0]
	if r := w.failedRank.Load(); r >= 0 {
		return w.peerErr(int(r))
	}
	t := c.Now()
	a := &w.align
	a.mu.Lock()
	g := a.gen
	g.max = max(g.max, t)
	a.arrived++
	if a.arrived == w.size {
		a.arrived = 0
		g.max = max(g.max, w.coresBound(a.last))
		a.last = g.max
		a.gen = &alignGen{done: make(chan struct{})}
		a.mu.Unlock()
		for _, p := range w.conns {
			p.mu.Lock()
			if pl := &p.lanes[0]; pl.blocked && pl.waitFrom == waitAlign {
				p.unblockLocked(pl)
			}
			p.mu.Unlock()
		}
		close(g.done)
		c.setClock(ln, g.max)
		return nil
	}
	c.mu.Lock()
	zero := c.blockLocked(ln, waitAlign, transport.Header{}, 0)
	c.mu.Unlock()
	a.mu.Unlock()
	if zero {
		w.checkDeadlock()
	}
	err := c.awaitAlign(ctx, ln, g)
	if err != nil {
		a.mu.Lock()
		if a.gen == g {
			a.arrived--
		}
		a.mu.Unlock()
		return err
	}
	c.setClock(ln, g.max)
	return nil
}

func (c *Conn) awaitAlign(ctx context.Context, ln *lane, g *alignGen) error {
	w := c.world
	ln.timer.Reset(w.timeout)
	defer ln.timer.Stop()
	for {
		select {
		case <-g.done:
			return c.leave(ln, nil)
		case <-ln.wake:
			c.mu.Lock()
			err := ln.deadlock
			ln.deadlock = nil
			c.mu.Unlock()
			if err != nil {
				return c.leave(ln, err)
			}
		case <-ctx.Done():
			return c.leave(ln, ctx.Err())
		case <-c.end.Dead():
			return c.leave(ln, c.end.Err())
		case <-w.failed:
			select {
			case <-g.done:
				return c.leave(ln, nil)
			default:
			}
			return c.leave(ln, w.peerErr(int(w.failedRank.Load())))
		case <-ln.timer.C:
			return c.leave(ln, &transport.TimeoutError{Peer: -1, What: "AlignClocks", After: w.timeout.String()})
		}
	}
}
