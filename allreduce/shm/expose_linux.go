package shm

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

var _ transport.PeerMemory = (*Conn)(nil)

// exposure is the endpoint's state of its current exposure (one at a
// time: the group runs one collective at a time).
type exposure struct {
	k     uint64   // the number of the exposure under way, or next
	open  bool     // Expose returned and Release has not
	n     int      // its length
	views [][]byte // by rank: each rank's copy, in its file
	// held: the exposure holds a reference on the mappings (refs) from
	// Expose to Release, so that a Close or Abort from another goroutine
	// (a survivor's watch aborting the group) cannot unmap the views
	// while the caller still reads them after Arrive.
	held bool
}

// MaxExposure is the largest buffer Expose lends: exposures are copies
// in the ranks' files (expose.go).
func (c *Conn) MaxExposure() int { return exposeCap }

// Expose copies p into this rank's exposure buffer, publishes it under h,
// and waits until every rank has exposed; it returns every rank's copy,
// by rank (this rank's own too, which the caller may write). A peer that
// exposed another header or length is a *transport.MismatchError here
// and, by symmetry, there. p longer than MaxExposure is an error wrapping
// transport.ErrInvalid.
func (c *Conn) Expose(ctx context.Context, h transport.Header, p []byte) ([][]byte, error) {
	if len(p) > exposeCap {
		return nil, fmt.Errorf("shm rank %d: exposure of %d bytes: %w (shm lends at most %d)", c.rank, len(p), transport.ErrInvalid, exposeCap)
	}
	if c.ex.open {
		return nil, fmt.Errorf("shm rank %d: Expose: %w: the last exposure was not released", c.rank, transport.ErrInvalid)
	}
	if !c.enter() {
		return nil, c.core.End.Err()
	}
	defer c.leave()
	k := c.ex.k
	c.ex.k++
	if c.size == 1 {
		c.ex.views = append(c.ex.views[:0], p)
		c.ex.open, c.ex.n = true, len(p)
		return c.ex.views, nil
	}
	if !c.refs.acquire() { // the views' hold (exposure.held), until Release
		return nil, c.core.End.Err()
	}
	held := false
	defer func() {
		if !held {
			c.refs.release()
		}
	}()
	own := c.own.exposeBuf(k)
	copy(own[exposeHeaderLen:], p)
	encodeExposeFields(own[:exposeHeaderLen], h, len(p))
	atomic.StoreUint64(c.own.exposedWord(k), k+1)
	c.ringPeers()

	views := c.ex.views[:0]
	for range c.size {
		views = append(views, nil)
	}
	views[c.rank] = own[exposeHeaderLen : exposeHeaderLen+len(p) : exposeHeaderLen+len(p)]
	missing := c.size - 1
	w := c.newWaiter("expose", -1)
	var hdr [exposeHeaderLen]byte
	for missing > 0 {
		moved := false
		for q, l := range c.core.Links {
			if l == nil || views[q] != nil {
				continue
			}
			got := atomic.LoadUint64(l.reg.exposedWord(k))
			if got < k+1 {
				w.peer = q
				continue
			}
			if got > k+1 {
				w.stop()
				return nil, l.corrupt(fmt.Errorf("%w: rank %d's exposure count %d, expected at most %d", ErrCorrupt, q, got, k+1))
			}
			buf := l.reg.exposeBuf(k)
			copy(hdr[:], buf[:exposeHeaderLen])
			rh, n, err := decodeExposeFields(hdr[:])
			if err != nil {
				w.stop()
				return nil, l.corrupt(fmt.Errorf("rank %d's exposure %d: %w", q, k, err))
			}
			if rh != h || n != len(p) {
				w.stop()
				return nil, l.fail(&transport.MismatchError{Rank: c.rank, Peer: q, Local: h, LocalBytes: len(p), Remote: rh, RemoteBytes: n})
			}
			views[q] = buf[exposeHeaderLen : exposeHeaderLen+n : exposeHeaderLen+n]
			missing--
			moved = true
		}
		if missing == 0 {
			break
		}
		if moved {
			w.moved()
			continue
		}
		if err := w.idle(ctx, c.core.Links[w.peer], nil); err != nil {
			return nil, err
		}
	}
	w.stop()
	c.ex.views, c.ex.open, c.ex.n = views, true, len(p)
	c.ex.held, held = true, true
	return views, nil
}

// Arrive returns once every rank has arrived in the current exposure.
func (c *Conn) Arrive(ctx context.Context) error {
	if !c.ex.open {
		return fmt.Errorf("shm rank %d: Arrive: %w: no exposure", c.rank, transport.ErrInvalid)
	}
	if c.size == 1 {
		return nil
	}
	if !c.enter() {
		return c.core.End.Err()
	}
	defer c.leave()
	k := c.ex.k - 1
	atomic.StoreUint64(c.own.arrivedWord(), k+1)
	c.ringPeers()
	w := c.newWaiter("barrier", -1)
	for q := 0; q < c.size; {
		l := c.core.Links[q]
		if l == nil || atomic.LoadUint64(l.reg.arrivedWord()) >= k+1 {
			q++
			w.moved()
			continue
		}
		w.peer = q
		if err := w.idle(ctx, l, nil); err != nil {
			return err
		}
	}
	w.stop()
	return nil
}

// Release ends the current exposure. It does not wait for the peers
// (expose.go says why that is safe): the caller's buffer was never lent.
func (c *Conn) Release(context.Context) error {
	if !c.ex.open {
		return fmt.Errorf("shm rank %d: Release: %w: no exposure", c.rank, transport.ErrInvalid)
	}
	c.ex.open = false
	clear(c.ex.views)
	if c.ex.held {
		c.ex.held = false
		c.refs.release() // the mappings may go now (Close after the last call)
	}
	return nil
}

// exposeBuf is exposure k's buffer (header and data) in region r.
func (r *region) exposeBuf(k uint64) []byte {
	off := r.lay.exposeOff + exposeBufOff(k)
	return r.mem[off : off+exposeBufLen : off+exposeBufLen]
}

// exposedWord is the exposed word of exposure k's buffer in region r.
func (r *region) exposedWord(k uint64) *uint64 {
	return r.u64(r.lay.exposeOff + exposeBufOff(k))
}

// arrivedWord is region r's arrived word.
func (r *region) arrivedWord() *uint64 { return r.u64(r.lay.exposeOff) }

// ringPeers wakes the peers that sleep on their doorbells.
func (c *Conn) ringPeers() {
	for _, l := range c.core.Links {
		if l != nil {
			l.peerBell.ring()
		}
	}
}
