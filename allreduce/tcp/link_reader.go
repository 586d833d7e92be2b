package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ringddp/ringddp/allreduce/transport"
)

func (l *link) readLoop() {
	defer close(l.rexit)
	defer l.poll.close()
	defer l.nc.Close()
	var hb [headerLen + tagLen]byte
	var f frame
	for {
		if _, err := io.ReadFull(l.br, hb[:headerLen+l.tagLen()]); err != nil {
			l.readFailed(err, false)
			return
		}
		if l.rp != nil {
			if err := l.rp.open(hb[:]); err != nil {
				l.authFailed(err)
				return
			}
		}
		if err := decodeHeaderMagic(hb[:headerLen], &f, l.magic); err != nil {
			l.headerFailed(hb[:headerLen], err)
			return
		}
		switch f.typ {
		case typeData:
			if f.length > l.c.cfg.MaxMessage {
				l.fail(l.peerErr(fmt.Errorf("protocol error: %d-byte message exceeds the %d-byte limit", f.length, l.c.cfg.MaxMessage)))
				return
			}
			if !l.deliver(&f) {
				return
			}
		case typeNack:
			var b [nackLen + tagLen]byte
			if err := l.readRecord(b[:nackLen]); err != nil {
				l.recordFailed(err)
				return
			}
			var sent frame
			if err := decodeHeader(b[8:], &sent); err != nil {
				l.fail(l.peerErr(fmt.Errorf("protocol error in nack: %w", err)))
				return
			}
			l.fail(&transport.MismatchError{Rank: l.c.rank, Peer: l.peer, Local: sent.h, LocalBytes: int(sent.length),
				Remote: f.h, RemoteBytes: int(binary.BigEndian.Uint64(b[:]))})
		case typeAbort:
			var b [maxCauseLen + tagLen]byte
			cause := b[:f.length]
			if f.length > 0 {
				if err := l.readRecord(cause); err != nil {
					l.recordFailed(err)
					return
				}
			}
			ae, err := decodeAbort(l.peer, l.c.size, f.flags, cause)
			if err != nil {
				l.fail(l.peerErr(fmt.Errorf("protocol error in abort: %w", err)))
				return
			}
			l.fail(l.peerErr(ae))
			// Acknowledge: the peer's Abort waits for this end to close.
			_ = l.nc.CloseWrite()
		case typeStall:
			var b [stallLen + tagLen]byte
			if err := l.readRecord(b[:stallLen]); err != nil {
				l.recordFailed(err)
				return
			}
			s, err := decodeStall(l.peer, l.c.size, f.h, b[:stallLen])
			if err != nil {
				l.fail(l.peerErr(fmt.Errorf("protocol error in stall notice: %w", err)))
				return
			}
			l.c.stalls.Record(s)
		case typeGoodbye:
			l.fail(l.peerErr(errPeerClosed))
			_ = l.nc.CloseWrite() // acknowledge, as for an abort
		}
	}
}

// readRecord reads the payload record of len(b) bytes into b, whose
// capacity leaves room for its tag, and checks it.
func (l *link) readRecord(b []byte) error {
	rec := b[:len(b)+l.tagLen()]
	if _, err := io.ReadFull(l.br, rec); err != nil {
		return err
	}
	if l.rp != nil {
		return l.rp.open(rec)
	}
	return nil
}

// recordFailed handles readRecord's failure mid-frame.
func (l *link) recordFailed(err error) {
	if errors.Is(err, ErrWireAuth) {
		l.authFailed(err)
	} else {
		l.readFailed(err, true)
	}
}

// authFailed fails the link on a record that failed its wire protection
// check. Nothing more from the peer can be trusted, but the socket stays
// open, its input read and dropped, until the peer closes or this
// endpoint's shutdown linger ends: so the peer is not left blocked in a
// write, and this rank's abort frame, which names the cause, reaches it.
func (l *link) authFailed(err error) {
	l.fail(err)
	_, _ = io.Copy(io.Discard, l.br)
}

// headerFailed fails the link on a malformed header, telling a peer that
// protects its frames (another -wire-protection) from garbage.
func (l *link) headerFailed(b []byte, err error) {
	if l.rp == nil && binary.BigEndian.Uint32(b) == macMagic {
		l.authFailed(fmt.Errorf("tcp rank %d: link to rank %d: %w: wire protection mismatch: rank %d sends MAC-protected frames (-wire-protection mac), this rank uses none",
			l.c.rank, l.peer, ErrWireAuth, l.peer))
		return
	}
	if l.rp == nil && binary.BigEndian.Uint32(b) != frameMagic {
		err = fmt.Errorf("%w (does rank %d use another -wire-protection than this rank's none?)", err, l.peer)
	}
	l.fail(l.peerErr(fmt.Errorf("protocol error: %w", err)))
}

// readFailed records a read error: the peer went away (or, once this
// endpoint is shut down, the linger ended).
func (l *link) readFailed(err error, midFrame bool) {
	what := "connection lost"
	if midFrame {
		what = "connection lost in the middle of a message"
	}
	l.fail(l.peerErr(fmt.Errorf("%s: %w", what, err)))
}

// deliver hands a data frame's payload to the receiver waiting for it, in
// pieces, or discards it if the link has failed. It reports whether the
// stream is still readable.
func (l *link) deliver(f *frame) bool {
	var w want
	select {
	case w = <-l.want:
	case <-l.failed:
		return l.discard(f.length)
	case <-l.c.core.End.Dead():
		return l.discard(f.length)
	}
	select {
	case <-l.failed:
		return l.discard(f.length)
	default:
	}
	if f.h != w.h || f.length != w.n {
		mm := &transport.MismatchError{Rank: l.c.rank, Peer: l.peer, Local: w.h, LocalBytes: int(w.n), Remote: f.h, RemoteBytes: int(f.length)}
		l.mismatch.Store(mm)
		l.fail(mm)
		select {
		case l.pieces <- piece{err: mm}:
		default: // the receiver sees the failure anyway
		}
		return l.discard(f.length)
	}
	if f.length == 0 {
		select {
		case l.pieces <- piece{}:
		case <-l.failed:
		}
		return true
	}
	if l.bufs[0] == nil {
		for i := range l.bufs {
			l.bufs[i] = make([]byte, pieceSize+l.tagLen())
			l.free <- l.bufs[i]
		}
	}
	for off := int64(0); off < f.length; {
		n := int(min(int64(pieceSize), f.length-off))
		p := piece{n: n}
		if w.dst != nil {
			placed, err := l.place(w.dst[off : off+int64(n)])
			if err != nil {
				l.recordFailed(err)
				return false
			}
			if !placed {
				return l.discard(f.length - off)
			}
		} else {
			select {
			case p.buf = <-l.free:
			case <-l.failed:
				return l.discard(f.length - off)
			case <-l.c.core.End.Dead():
				return l.discard(f.length - off)
			}
			if err := l.readRecord(p.buf[:n]); err != nil {
				l.recordFailed(err)
				return false
			}
		}
		off += int64(n)
		select {
		case l.pieces <- p:
		case <-l.failed:
			return l.discard(f.length - off)
		}
	}
	return true
}

// place reads len(b) payload bytes, one record, straight into b, part of a
// receiver's destination, unless the receiver has given up on it (placed
// false). Under mac the record's bytes land in b before its tag is
// checked; a record that fails the check fails the receive, like any
// receive that fails part way, which leaves the destination undefined.
// Under aead the record is read aside and decrypted into b once checked.
func (l *link) place(b []byte) (placed bool, err error) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.dstRevoked {
		return false, nil
	}
	select {
	case <-l.failed:
		return false, nil
	default:
	}
	switch {
	case l.rp == nil:
		_, err = io.ReadFull(l.br, b)
	case l.rp.encrypt:
		if l.rscratch == nil {
			l.rscratch = make([]byte, pieceSize+tagLen)
		}
		rec := l.rscratch[:len(b)+tagLen]
		if _, err = io.ReadFull(l.br, rec); err == nil {
			err = l.rp.openTo(b, rec)
		}
	default:
		if _, err = io.ReadFull(l.br, b); err == nil {
			if _, err = io.ReadFull(l.br, l.rtag[:]); err == nil {
				err = l.rp.openMAC(b, l.rtag[:])
			}
		}
	}
	return err == nil, err
}

// revoke takes back a destination from the reader after a receive gave
// up: once it returns the reader no longer writes into it. A read into
// the destination under way is ended by moving the read deadline into the
// past; the link has failed (or this endpoint is closing) anyway.
func (l *link) revoke() {
	if !l.dmu.TryLock() {
		l.poll.interrupt()
		l.dmu.Lock()
	}
	l.dstRevoked = true
	l.dmu.Unlock()
}

// discard drops the remaining n bytes of a data frame's payload, which
// start at a record boundary, unchecked: the link has failed or the
// message was refused.
func (l *link) discard(n int64) bool {
	if l.rp != nil {
		recs := records(n)
		l.rp.skip(recs)
		n += recs * tagLen
	}
	if _, err := io.CopyN(io.Discard, l.br, n); err != nil {
		l.readFailed(err, true)
		return false
	}
	return true
}

// recv receives the next message, which must carry h and n bytes, into
// sink. The reader reads the payload straight into a transport.Placer's
// destination; other sinks get it in pieces.
func (l *link) recv(ctx context.Context, h transport.Header, n int, sink transport.Sink) error {
	var dst []byte
	if pl, ok := sink.(transport.Placer); ok && n > 0 {
		dst = pl.Place(n)
	}
	l.poll.expect(n)
	err := l.receive(ctx, want{h: h, n: int64(n), dst: dst}, sink)
	l.poll.done()
	if err != nil && dst != nil {
		l.revoke()
	}
	return err
}

func (l *link) receive(ctx context.Context, w want, sink transport.Sink) error {
	n := int(w.n)
	select {
	case l.want <- w:
	default:
		// A receive that gave up left its expectation queued.
		return l.unusable()
	}
	timeout := l.c.cfg.Timeout
	l.rtimer.Reset(timeout)
	defer l.rtimer.Stop()
	off := 0
	for {
		var p piece
		select {
		case p = <-l.pieces:
		case <-l.failed:
			select {
			case p = <-l.pieces:
			default:
				select {
				case <-l.c.core.End.Dead(): // this endpoint closing explains it better
					return l.c.core.End.Err()
				default:
				}
				l.nack()
				return l.err()
			}
		case <-l.c.core.End.Dead():
			return l.c.core.End.Err()
		case <-ctx.Done():
			l.fail(fmt.Errorf("link to rank %d broken: a receive was abandoned: %w", l.peer, ctx.Err()))
			return ctx.Err()
		case <-l.rtimer.C:
			err := &transport.TimeoutError{Peer: l.peer, What: "recv", After: timeout.String()}
			l.fail(err)
			return err
		}
		if p.err != nil {
			l.nack()
			return p.err
		}
		if p.buf != nil {
			sink.Consume(off, p.buf[:p.n])
			l.free <- p.buf
		}
		off += p.n
		if off >= n {
			return nil
		}
		l.rtimer.Reset(timeout)
	}
}

func (l *link) unusable() error {
	select {
	case <-l.failed:
		return l.err()
	default:
		l.fail(fmt.Errorf("link to rank %d broken: receive state lost", l.peer))
		return l.err()
	}
}
