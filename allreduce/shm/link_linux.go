//go:build linux

package shm

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// link is this rank's side of the link with one peer: the ring out (in
// the peer's file, this rank producing), the ring in (in this rank's
// file, this rank consuming), the peer's doorbell, and the Unix socket
// whose closing says the peer's process is gone.
type link struct {
	c        *Conn
	peer     int
	reg      *region // the peer's file
	sock     *net.UnixConn
	pid      int
	out, in  ringEnd
	peerBell doorbell

	gone atomic.Bool // the socket closed or failed

	// inHdr is where a receive copies each slot header of the ring in
	// before it checks it (one receive per link at a time; a field, so
	// that no receive allocates).
	inHdr [slotHeaderLen]byte

	failed  atomic.Bool
	failMu  sync.Mutex
	failErr error
}

// ringEnd is one side's view of one ring.
type ringEnd struct {
	head, tail *uint64
	nackState  *uint32
	nack       []byte // the nack block (nackLen bytes)
	slots      []byte // nslots slots of stride bytes
	stride     int
	nslots     uint64
	cap        int    // payload bytes per slot
	local      uint64 // this side's count: head for the producer, tail for the consumer
	seen       uint64 // the producer's latest reading of tail: local-seen slots may be in use
}

func newRingEnd(r *region, ring int) ringEnd {
	lay := r.lay
	ctl := lay.controlAt(ring)
	start := lay.slotAt(ring, 0)
	end := start + int64(lay.slots)*lay.stride
	return ringEnd{
		head:      r.u64(ctl + headOff),
		tail:      r.u64(ctl + tailOff),
		nackState: r.u32(ctl + nackOff),
		nack:      r.mem[ctl+nackOff : ctl+nackOff+nackLen : ctl+nackOff+nackLen],
		slots:     r.mem[start:end:end],
		stride:    int(lay.stride),
		nslots:    uint64(lay.slots),
		cap:       lay.slotSize,
	}
}

// slot is slot number seq's memory (header and payload).
func (e *ringEnd) slot(seq uint64) []byte {
	k := int(seq%e.nslots) * e.stride
	return e.slots[k : k+e.stride : k+e.stride]
}

func newLink(c *Conn, peer int, reg *region, sock *net.UnixConn) *link {
	return &link{
		c:        c,
		peer:     peer,
		reg:      reg,
		sock:     sock,
		pid:      peerPID(sock),
		out:      newRingEnd(reg, ringIndex(peer, c.rank)),
		in:       newRingEnd(c.own, ringIndex(c.rank, peer)),
		peerBell: reg.bell(),
	}
}

// start runs the watcher: it reads the socket, on which the peer never
// writes after setup, until it fails or ends — the peer's process exited,
// was killed or closed its endpoint — then marks the link gone and rings
// this rank's doorbell, so that a call waiting on the peer fails at once.
func (l *link) start() {
	c := l.c
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		var b [64]byte
		for {
			if _, err := l.sock.Read(b[:]); err != nil {
				break
			}
		}
		l.gone.Store(true)
		if !c.core.End.Ended() && c.enter() {
			c.bell.force()
			c.leave()
		}
	}()
}

// err is the link's lasting failure (a mismatch, a nack, corruption), or
// nil.
func (l *link) err() error {
	if !l.failed.Load() {
		return nil
	}
	l.failMu.Lock()
	defer l.failMu.Unlock()
	return l.failErr
}

// fail marks the link failed with err (the first failure stays) and
// returns the link's error.
func (l *link) fail(err error) error {
	l.failMu.Lock()
	defer l.failMu.Unlock()
	if l.failErr == nil {
		l.failErr = err
		l.failed.Store(true)
	}
	return l.failErr
}

// corrupt fails the link over something malformed in the peer's memory.
func (l *link) corrupt(err error) error {
	return l.fail(&transport.PeerError{Peer: l.peer, Err: err})
}

// check reports why the link cannot be used, if it cannot: a lasting
// failure, the peer's nack of this rank's message, the peer's status
// (closed or aborted), the peer's process gone. Calls run it whenever
// their rings do not move. The peer's status and its exit are not
// lasting: what it published before them is still delivered (drive steps
// once more after check fails), as a socket's data before its EOF.
func (l *link) check() error {
	if err := l.err(); err != nil {
		return err
	}
	if atomic.LoadUint32(l.out.nackState) != 0 {
		var b [nackLen]byte
		copy(b[:], l.out.nack)
		mm, err := decodeNack(b[:], l.c.rank, l.peer)
		if err != nil {
			return l.corrupt(err)
		}
		return l.fail(mm)
	}
	if err := l.status(); err != nil {
		return err
	}
	if l.gone.Load() {
		// It may have recorded why just before it went.
		if err := l.status(); err != nil {
			return err
		}
		return &transport.PeerError{Peer: l.peer, Err: fmt.Errorf("its process (pid %d) is gone: its shm socket closed without a goodbye", l.pid)}
	}
	return nil
}

func (l *link) status() error {
	if err := l.reg.peerStatus(l.peer, l.c.cfg.WorldSize); err != nil {
		return &transport.PeerError{Peer: l.peer, Err: err}
	}
	return nil
}

// nack refuses the message at the head of the ring in: it records what
// this rank expected and what came in the ring's nack block, for the
// sender, wakes the sender, and fails the link with mm.
func (l *link) nack(mm *transport.MismatchError, ref transport.Header, refLen uint64) error {
	if atomic.LoadUint32(l.in.nackState) == 0 {
		encodeNack(l.in.nack, mm.Local, mm.LocalBytes, ref, refLen)
		atomic.StoreUint32(l.in.nackState, 1)
	}
	l.peerBell.force()
	return l.fail(mm)
}
