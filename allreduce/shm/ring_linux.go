//go:build linux

package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// sendOp is a message being written into a ring, slot by slot.
type sendOp struct {
	l    *link
	h    transport.Header
	p    []byte
	off  int
	done bool
}

// step fills every free slot it can with the message's next pieces and
// publishes each (head+1), ringing the peer's doorbell if it sleeps. It
// never blocks.
func (s *sendOp) step() (bool, error) {
	e := &s.l.out
	prog := false
	for !s.done {
		if e.local-e.seen == e.nslots {
			// Full as far as this side knew: read the consumer's count
			// (only then, sparing a cache miss per message otherwise).
			tail := atomic.LoadUint64(e.tail)
			used := e.local - tail
			if used > e.nslots {
				return prog, s.l.corrupt(fmt.Errorf("%w: ring to rank %d: tail %d with head %d (%d slots)", ErrCorrupt, s.l.peer, tail, e.local, e.nslots))
			}
			e.seen = tail
			if used == e.nslots {
				break
			}
		}
		slot := e.slot(e.local)
		piece := min(e.cap, len(s.p)-s.off)
		encodeSlot(slot, e.local, s.h, uint64(len(s.p)), uint64(s.off), uint32(piece))
		copy(slot[slotHeaderLen:], s.p[s.off:s.off+piece])
		e.local++
		atomic.StoreUint64(e.head, e.local)
		s.l.peerBell.ring()
		s.off += piece
		prog = true
		s.done = s.off == len(s.p)
	}
	return prog, nil
}

// recvOp is a message being read out of a ring, slot by slot.
type recvOp struct {
	l       *link
	h       transport.Header
	n       int
	sink    transport.Sink
	off     int
	started bool
	done    bool
}

// step hands every full slot of the message to the sink and frees it
// (tail+1), ringing the peer's doorbell if it sleeps. It checks each
// slot's header (decodeSlot and the message's own bookkeeping) on a copy
// taken out of shared memory, so a corrupted or changing slot is an error,
// never an access outside the slot. It never blocks.
func (o *recvOp) step() (bool, error) {
	e := &o.l.in
	prog := false
	for !o.done {
		head := atomic.LoadUint64(e.head)
		avail := head - e.local
		if avail > e.nslots {
			return prog, o.l.corrupt(fmt.Errorf("%w: ring from rank %d: head %d with tail %d (%d slots)", ErrCorrupt, o.l.peer, head, e.local, e.nslots))
		}
		if avail == 0 {
			break
		}
		slot := e.slot(e.local)
		hb := &o.l.inHdr // a copy of the header, out of the peer's reach
		copy(hb[:], slot)
		var sh slotHeader
		if err := decodeSlot(hb[:], &sh, e.cap); err != nil {
			return prog, o.l.corrupt(fmt.Errorf("ring from rank %d, slot %d: %w", o.l.peer, e.local, err))
		}
		if sh.seq != e.local {
			return prog, o.l.corrupt(fmt.Errorf("%w: ring from rank %d: slot sequence number %d, want %d", ErrCorrupt, o.l.peer, sh.seq, e.local))
		}
		if !o.started {
			if sh.off != 0 {
				return prog, o.l.corrupt(fmt.Errorf("%w: ring from rank %d: a message starts at offset %d", ErrCorrupt, o.l.peer, sh.off))
			}
			if sh.h != o.h || sh.total != uint64(o.n) {
				mm := &transport.MismatchError{Rank: o.l.c.rank, Peer: o.l.peer, Local: o.h, LocalBytes: o.n, Remote: sh.h, RemoteBytes: int(sh.total)}
				return prog, o.l.nack(mm, sh.h, sh.total)
			}
			o.started = true
		} else if sh.h != o.h || sh.total != uint64(o.n) || sh.off != uint64(o.off) {
			return prog, o.l.corrupt(fmt.Errorf("%w: ring from rank %d: piece {%v, %d bytes, offset %d} in the middle of {%v, %d bytes} at offset %d",
				ErrCorrupt, o.l.peer, sh.h, sh.total, sh.off, o.h, o.n, o.off))
		}
		want := min(e.cap, o.n-o.off)
		if int(sh.piece) != want {
			return prog, o.l.corrupt(fmt.Errorf("%w: ring from rank %d: piece of %d bytes at offset %d, want %d", ErrCorrupt, o.l.peer, sh.piece, o.off, want))
		}
		if want > 0 {
			end := slotHeaderLen + want
			o.sink.Consume(o.off, slot[slotHeaderLen:end:end])
		}
		e.local++
		atomic.StoreUint64(e.tail, e.local)
		o.l.peerBell.ring()
		o.off += want
		prog = true
		o.done = o.off == o.n
	}
	return prog, nil
}
