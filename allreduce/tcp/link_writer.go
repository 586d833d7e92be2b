package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

func (l *link) writeLoop() {
	defer close(l.wexit)
	for {
		select {
		case <-l.wreq:
		case <-l.c.core.End.Dead():
			return
		}
		err := l.writeData(l.sh, l.sp)
		l.sp = nil
		l.wdone <- err
	}
}

func (l *link) writeData(h transport.Header, p []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.torn {
		return errInterrupted
	}
	f := frame{typ: typeData, h: h, length: int64(len(p))}
	if l.wp != nil {
		return l.writeProtected(&f, p)
	}
	if len(p) <= smallFrame {
		b := l.stage[:headerLen+len(p)]
		encodeHeader(b, &f)
		copy(b[headerLen:], p)
		return l.write(b)
	}
	encodeHeader(l.whdr[:], &f)
	if err := l.write(l.whdr[:headerLen]); err != nil {
		return err
	}
	for off := 0; off < len(p); off += writeChunk {
		if err := l.write(p[off:min(off+writeChunk, len(p))]); err != nil {
			return err
		}
	}
	return nil
}

// writeProtected writes a data frame as records (wireDir); wmu is held.
// A small frame goes out in one write. A large payload goes out protBatch
// records (1 MiB) a write: under mac from the caller's buffer with the
// tags between the records (writev), under aead sealed into a staging
// buffer.
func (l *link) writeProtected(f *frame, p []byte) error {
	if len(p) <= smallFrame {
		b := l.wp.appendHeader(l.stage[:0], f)
		if len(p) > 0 {
			b = l.wp.appendRecord(b, p)
		}
		return l.write(b)
	}
	if l.wp.encrypt {
		b := l.wp.appendHeader(l.wbig[:0], f)
		for off := 0; off < len(p); {
			for k := 0; k < protBatch && off < len(p); k++ {
				end := min(off+pieceSize, len(p))
				b = l.wp.appendRecord(b, p[off:end])
				off = end
			}
			if err := l.write(b); err != nil {
				return err
			}
			b = l.wbig[:0]
		}
		return nil
	}
	iov := append(l.wiov[:0], l.wp.appendHeader(l.whdr[:0], f))
	for off := 0; off < len(p); {
		for k := 0; k < protBatch && off < len(p); k++ {
			end := min(off+pieceSize, len(p))
			tag := l.wtags[k*tagLen : (k+1)*tagLen]
			l.wp.macTag(tag, p[off:end])
			iov = append(iov, p[off:end], tag)
			off = end
		}
		l.wbufs = iov
		if err := l.writev(); err != nil {
			return err
		}
		iov = l.wiov[:0]
	}
	return nil
}

// write writes all of b under a fresh deadline; wmu is held. A failure
// tears the frame: the peer can parse nothing after it, so the write side
// is shut and the link fails.
func (l *link) write(b []byte) error {
	_ = l.nc.SetWriteDeadline(time.Now().Add(l.c.cfg.Timeout))
	var err error
	if l.interrupted.Load() {
		err = errInterrupted
	} else if _, err = l.nc.Write(b); err == nil {
		return nil
	}
	return l.writeFailed(err)
}

// writev writes l.wbufs, as write does.
func (l *link) writev() error {
	_ = l.nc.SetWriteDeadline(time.Now().Add(l.c.cfg.Timeout))
	var err error
	if l.interrupted.Load() {
		err = errInterrupted
	} else if _, err = l.wbufs.WriteTo(l.nc); err == nil {
		return nil
	}
	clear(l.wiov[:cap(l.wiov)]) // drop the caller's buffer
	return l.writeFailed(err)
}

// writeFailed handles a failed write; wmu is held.
func (l *link) writeFailed(err error) error {
	l.torn = true
	_ = l.nc.CloseWrite()
	if l.interrupted.Load() {
		return errInterrupted // whoever interrupted fails the link with its reason
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.fail(&transport.TimeoutError{Peer: l.peer, What: "send", After: l.c.cfg.Timeout.String()})
		return l.err()
	}
	// The peer is gone. Its last frames (an abort, a goodbye) say better
	// why than the broken pipe does; the reader may still be parsing them.
	t := time.NewTimer(readerGrace)
	select {
	case <-l.failed:
	case <-l.rexit:
	case <-t.C:
	}
	t.Stop()
	l.fail(l.peerErr(fmt.Errorf("connection lost: %w", err)))
	return l.err()
}

// startSend hands p to the writer goroutine.
func (l *link) startSend(h transport.Header, p []byte) {
	l.sh, l.sp = h, p
	l.wreq <- struct{}{}
}

// waitSend waits until the writer is done with p.
func (l *link) waitSend(ctx context.Context) error {
	select {
	case err := <-l.wdone:
		return l.sendErr(ctx, err)
	default:
	}
	select {
	case err := <-l.wdone:
		return l.sendErr(ctx, err)
	case <-l.failed:
		// A peer that closes right after reading this frame fails the
		// link; the send still succeeded (finishSend sees that too).
		return l.finishSend(ctx)
	case <-l.c.core.End.Dead():
		return l.finishSend(ctx)
	case <-ctx.Done():
		return l.cancelSend(ctx.Err())
	}
}

// frameGrace is how long a frame under way may take to go out whole once
// its link has failed or its endpoint has begun to close. A frame cut
// short leaves the peer unable to parse anything after it, so it would
// lose the abort frame that tells it why this rank failed (it would see
// only "connection lost"); a peer that is alive drains its side after any
// failure, so a frame finishes quickly unless the peer is stuck.
const frameGrace = controlTimeout

// finishSend lets the frame being written finish, for at most frameGrace,
// after the link failed or this endpoint began to close, then cancels it.
func (l *link) finishSend(ctx context.Context) error {
	t := time.NewTimer(frameGrace)
	defer t.Stop()
	select {
	case err := <-l.wdone:
		select {
		case <-l.c.core.End.Dead():
			return l.c.core.End.Err()
		default:
		}
		return l.sendErr(ctx, err)
	case <-ctx.Done():
		return l.cancelSend(ctx.Err())
	case <-t.C:
		return l.cancelSend(nil)
	}
}

// sendErr explains a write cut short by whoever interrupted it: this
// endpoint closing, the caller's context, or the link failing.
func (l *link) sendErr(ctx context.Context, err error) error {
	if err != errInterrupted {
		return err
	}
	select {
	case <-l.c.core.End.Dead():
		return l.c.core.End.Err()
	default:
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	select {
	case <-l.failed:
		return l.err()
	default:
		return l.peerErr(err)
	}
}

// cancelSend stops a send in flight and waits until the writer has let go
// of the caller's buffer. A send cut short breaks the link (the frame is
// torn), so the link fails with reason, or keeps the failure it has.
func (l *link) cancelSend(reason error) error {
	l.interrupted.Store(true)
	_ = l.nc.SetWriteDeadline(time.Unix(1, 0))
	if reason != nil {
		l.fail(fmt.Errorf("link to rank %d broken: a send was abandoned: %w", l.peer, reason))
	} else {
		l.fail(fmt.Errorf("link to rank %d broken: a send was abandoned", l.peer))
	}
	werr := errInterrupted
	select {
	case werr = <-l.wdone:
	case <-l.wexit:
	}
	select {
	case <-l.c.core.End.Dead():
		return l.c.core.End.Err()
	default:
	}
	if reason != nil {
		return reason
	}
	if werr == nil {
		// The frame was out before the link failed (a peer that finished
		// its collective and closed, say): the send succeeded.
		return nil
	}
	return l.err()
}

// writeControl writes a control frame unless a data frame was cut short;
// wmu is held.
func (l *link) writeControl(typ, flags byte, h transport.Header, payload []byte, timeout time.Duration) {
	if l.torn {
		return
	}
	f := frame{typ: typ, flags: flags, h: h, length: int64(len(payload))}
	var b []byte
	if l.wp != nil {
		b = l.wp.appendHeader(make([]byte, 0, headerLen+len(payload)+2*tagLen), &f)
		if len(payload) > 0 {
			b = l.wp.appendRecord(b, payload)
		}
	} else {
		b = make([]byte, headerLen+len(payload))
		encodeHeader(b, &f)
		copy(b[headerLen:], payload)
	}
	_ = l.nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := l.nc.Write(b); err != nil {
		l.torn = true
	}
}

// nack tells the sender of a refused message what this rank expected. If
// a data frame to that peer is being written, the nack follows it from
// another goroutine, so the receiver is not held up by a peer that is not
// reading (an abort, if it comes first, carries the mismatch anyway).
func (l *link) nack() {
	mm := l.mismatch.Load()
	if mm == nil {
		return
	}
	l.nackOnce.Do(func() {
		payload := make([]byte, nackLen)
		binary.BigEndian.PutUint64(payload, uint64(mm.LocalBytes))
		encodeHeader(payload[8:], &frame{typ: typeData, h: mm.Remote, length: int64(mm.RemoteBytes)})
		if l.wmu.TryLock() {
			l.writeControl(typeNack, 0, mm.Local, payload, l.c.cfg.Timeout)
			l.wmu.Unlock()
			return
		}
		go func() {
			l.wmu.Lock()
			defer l.wmu.Unlock()
			l.writeControl(typeNack, 0, mm.Local, payload, l.c.cfg.Timeout)
		}()
	})
}

// shutdown ends the link as this endpoint closes or aborts: the writer
// stops, typ (goodbye or abort) goes out if no frame is half written, the
// write side closes and the reader drains until the peer closes or linger
// passes, then closes the socket.
//
// A frame under way (a data frame, a nack) gets frameGrace to finish first,
// so that the control frame can follow it whole and the peer learns this
// endpoint's cause instead of seeing the connection drop mid-frame.
func (l *link) shutdown(typ, flags byte, cause []byte) {
	locked := l.lockWriterWithin(frameGrace)
	l.interrupted.Store(true)
	if locked {
		l.writeControl(typ, flags, transport.Header{}, cause, controlTimeout)
		l.torn = true // nothing may follow
		l.wmu.Unlock()
	} else {
		_ = l.nc.SetWriteDeadline(time.Unix(1, 0))
	}
	_ = l.nc.CloseWrite()
	l.poll.setReadDeadline(time.Now().Add(linger))
}

// lockWriterWithin takes wmu, waiting at most d for a frame under way.
func (l *link) lockWriterWithin(d time.Duration) bool {
	if l.wmu.TryLock() {
		return true
	}
	deadline := time.Now().Add(d)
	for pause := 50 * time.Microsecond; time.Now().Before(deadline); pause = min(2*pause, 10*time.Millisecond) {
		time.Sleep(pause)
		if l.wmu.TryLock() {
			return true
		}
	}
	return false
}
