package inproc

import (
	"context"
	"runtime"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

var _ transport.PeerMemory = (*Conn)(nil)

// Expose lends p to every peer on the same links messages use, so that a
// peer running a message-based collective instead sees a header mismatch,
// then takes every peer's buffer.
//
// On a mismatch this rank's own posts stay in place, so every peer also
// finds the mismatch (the group is then aborted and nothing reads the
// buffers). On any other failure the posts no peer has taken yet are
// withdrawn; a peer that already took this buffer fails at its next barrier.
func (c *Conn) Expose(ctx context.Context, h transport.Header, p []byte) ([][]byte, error) {
	n := c.world.size
	if c.views == nil {
		c.views = make([][]byte, n)
	}
	views := c.views
	views[c.rank] = p
	for q := 0; q < n; q++ {
		if q == c.rank {
			continue
		}
		if _, _, err := c.post(ctx, q, h, p); err != nil {
			c.withdraw()
			return nil, err
		}
	}
	for q := 0; q < n; q++ {
		if q == c.rank {
			continue
		}
		l := c.world.link(q, c.rank)
		if !l.spinFor(statePosted) {
			if err := c.park(ctx, l, q, statePosted, l.recvWake, l.recvTimer, "expose"); err != nil {
				c.withdraw()
				return nil, err
			}
		}
		if !l.state.CompareAndSwap(statePosted, stateTaken) {
			c.withdraw()
			return nil, c.withdrawn(ctx, l, q, "buffer")
		}
		// The link is ours now: its header and buffer are stable.
		gotH, gotP := l.h, l.p
		if gotH != h || len(gotP) != len(p) {
			l.verdict = &transport.MismatchError{Rank: q, Peer: c.rank, Local: gotH, LocalBytes: len(gotP), Remote: h, RemoteBytes: len(p)}
			l.state.Store(stateDone)
			poke(l.sendWake)
			return nil, &transport.MismatchError{Rank: c.rank, Peer: q, Local: h, LocalBytes: len(p), Remote: gotH, RemoteBytes: len(gotP)}
		}
		views[q] = gotP
	}
	return views, nil
}

// withdraw takes back the posts of this rank that no peer has taken.
func (c *Conn) withdraw() {
	for q := 0; q < c.world.size; q++ {
		if q != c.rank {
			c.world.link(c.rank, q).state.CompareAndSwap(statePosted, stateIdle)
		}
	}
	for i := range c.views {
		c.views[i] = nil
	}
}

// Arrive is a barrier over every rank, on per-rank arrival counters.
func (c *Conn) Arrive(ctx context.Context) error {
	c.arrivals++
	c.stage.Store(c.arrivals)
	for q, peer := range c.world.conns {
		if q != c.rank {
			poke(peer.wake)
		}
	}
	for q, peer := range c.world.conns {
		if q == c.rank {
			continue
		}
		if err := c.awaitStage(ctx, q, peer); err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) awaitStage(ctx context.Context, q int, peer *Conn) error {
	for i := 0; i < spinRounds; i++ {
		if peer.stage.Load() >= c.arrivals {
			return nil
		}
		runtime.Gosched()
	}
	t := c.barrierTimer
	if t == nil {
		t = time.NewTimer(c.world.timeout)
		c.barrierTimer = t
	} else {
		t.Reset(c.world.timeout)
	}
	defer t.Stop()
	for peer.stage.Load() < c.arrivals {
		select {
		case <-c.wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.end.Dead():
			return c.end.Err()
		case <-peer.end.Dead():
			if peer.stage.Load() >= c.arrivals {
				return nil
			}
			return c.peerErr(q)
		case <-t.C:
			return &transport.TimeoutError{Peer: q, What: "barrier", After: c.world.timeout.String()}
		case <-c.world.aborted:
			if peer.stage.Load() >= c.arrivals {
				return nil
			}
			return c.abortedErr()
		case <-c.world.failed:
			if peer.stage.Load() >= c.arrivals {
				return nil
			}
			if f := c.world.firstFailed(); f >= 0 && f != c.rank {
				return c.peerErr(f)
			}
		}
	}
	return nil
}

// Release waits for every rank, then takes back this rank's buffer. Peers
// took it (state taken) in Expose, so none mistakes it for a new message.
func (c *Conn) Release(ctx context.Context) error {
	if err := c.Arrive(ctx); err != nil {
		// Peers may still hold the buffer: leave the links to the abort
		// that follows a failed collective.
		c.withdraw()
		return err
	}
	for q := 0; q < c.world.size; q++ {
		if q != c.rank {
			l := c.world.link(c.rank, q)
			l.p = nil
			l.state.Store(stateIdle)
		}
	}
	for i := range c.views {
		c.views[i] = nil
	}
	return nil
}
