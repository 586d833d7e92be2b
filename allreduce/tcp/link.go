package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

const (
	// pieceSize is the most a receiver hands its sink at once; two such
	// buffers per link let the sink reduce one piece while the next is read.
	pieceSize = 256 << 10
	// smallFrame: payloads up to this size go out with their header in
	// one write.
	smallFrame = 32 << 10
	// writeChunk: larger payloads are written in chunks of this size, each
	// under a fresh deadline, so Timeout measures lack of progress.
	writeChunk  = 4 << 20
	readBufSize = 64 << 10
	// linger is how long a closed endpoint keeps draining a connection
	// before closing the socket, so that the peer reads our last frames
	// instead of a reset.
	linger = 2 * time.Second
	// controlTimeout bounds writing an abort or goodbye frame.
	controlTimeout = time.Second
	// readerGrace is how long a failed write waits for the reader to
	// explain the failure.
	readerGrace = 200 * time.Millisecond
	// ackWait bounds how long Close and Abort wait for the peers to
	// acknowledge the goodbye or abort frame (by closing their side), so
	// that once they return every peer knows.
	ackWait = time.Second
)

var errInterrupted = errors.New("send interrupted")

// want is what a receiver expects of the next message.
type want struct {
	h   transport.Header
	n   int64
	dst []byte // where the payload goes (a transport.Placer's), or nil: pieces
}

// piece is a filled receive buffer, n bytes placed in the receiver's
// destination (buf nil), or the end of a message in error.
type piece struct {
	buf []byte
	n   int
	err error
}

// link is this rank's connection to one peer: a reader goroutine that
// parses every frame the peer sends, and a writer goroutine for data
// frames, so that a send and a receive on the link proceed at once.
type link struct {
	c     *Conn
	peer  int
	nc    *net.TCPConn
	br    *bufio.Reader
	poll  *poller // when the reader polls the socket
	local bool    // the peer is on this host

	failed   chan struct{} // closed when the link can carry no more messages
	failOnce sync.Once
	failErr  error

	// Writing. wmu serialises frames on the socket: data frames by the
	// writer goroutine, control frames by whoever has one.
	wmu         sync.Mutex
	torn        bool        // a frame was cut short; nothing more may be written (under wmu)
	interrupted atomic.Bool // set before the write deadline is moved to the past
	wreq        chan struct{}
	wdone       chan error
	wexit       chan struct{}
	rexit       chan struct{}    // closed when the reader goroutine ends
	sh          transport.Header // the data frame requested, owned by the writer between wreq and wdone
	sp          []byte
	whdr        [headerLen + tagLen]byte
	stage       []byte

	// Wire protection (wireprotect.go); wp and rp nil under WireNone.
	// wp seals what this rank sends (under wmu); rp checks what the peer
	// sends (reader goroutine).
	wp, rp   *wireDir
	mode     WireProtection // the link's protection (auto resolved: forLink)
	magic    uint32         // the frame magic of the link's mode
	wtags    []byte         // mac: the tags of one large write, tagLen per record
	wiov     [][]byte       // mac: backing of wbufs
	wbufs    net.Buffers    // mac: one large write, the caller's payload and tags
	wbig     []byte         // aead: sealed records staged for one large write
	rscratch []byte         // aead: a record read for a placed destination
	rtag     [tagLen]byte

	// Reading.
	want     chan want
	pieces   chan piece
	free     chan []byte
	bufs     [2][]byte
	rtimer   *time.Timer
	mismatch atomic.Pointer[transport.MismatchError] // found by the reader, to be nacked
	nackOnce sync.Once

	// dmu is held by the reader while it reads into a receiver's
	// destination; a receive that gives up takes it to revoke the
	// destination, after which the reader discards instead.
	dmu        sync.Mutex
	dstRevoked bool // under dmu
}

// newLink makes the link to peer over nc, whose handshake gave key, the
// link's session key; it is started with start. A link that cannot be
// protected as configured is returned failed.
func newLink(c *Conn, peer int, nc *net.TCPConn, key wireKey) *link {
	l := &link{
		c:      c,
		peer:   peer,
		nc:     nc,
		poll:   newPoller(nc, c.cfg.Spin),
		failed: make(chan struct{}),
		wreq:   make(chan struct{}, 1),
		wdone:  make(chan error, 1),
		wexit:  make(chan struct{}),
		rexit:  make(chan struct{}),
		stage:  make([]byte, 0, headerLen+tagLen+smallFrame+tagLen),
		want:   make(chan want, 1),
		pieces: make(chan piece, 2),
		free:   make(chan []byte, 2),
		rtimer: time.NewTimer(time.Hour),
	}
	onOneHost := c.cfg.sameHost
	if onOneHost == nil {
		onOneHost = sameHost
	}
	l.mode = c.cfg.WireProtection.forLink(onOneHost(nc.LocalAddr(), nc.RemoteAddr()))
	l.magic = magicOf(l.mode)
	l.rtimer.Stop()
	if err := l.protect(l.mode, key); err != nil {
		l.fail(err)
	}
	l.br = bufio.NewReaderSize(&sockReader{l.poll}, readBufSize)
	if la, ok := nc.LocalAddr().(*net.TCPAddr); ok {
		if ra, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
			l.local = la.IP.Equal(ra.IP)
		}
	}
	return l
}

// protect sets up mode's wire protection, keyed from key.
func (l *link) protect(mode WireProtection, key wireKey) error {
	if mode == WireNone {
		return nil
	}
	if key == (wireKey{}) {
		// A zero key would make every link's keys public and reuse nonces.
		return fmt.Errorf("tcp rank %d: link to rank %d: -wire-protection %s needs the handshake's session key, and there is none (internal error)", l.c.rank, l.peer, mode)
	}
	var err error
	if l.wp, err = newWireDir(mode, key, l.c.rank, l.peer, l.c.rank); err == nil {
		l.rp, err = newWireDir(mode, key, l.peer, l.c.rank, l.c.rank)
	}
	if err == nil {
		l.rp.auto = l.c.cfg.WireProtection == WireAuto
	}
	if err != nil {
		return fmt.Errorf("tcp rank %d: link to rank %d: wire protection: %w", l.c.rank, l.peer, err)
	}
	if mode == WireAEAD {
		l.wbig = make([]byte, 0, headerLen+tagLen+protBatch*(pieceSize+tagLen))
	} else {
		l.wtags = make([]byte, protBatch*tagLen)
		l.wiov = make([][]byte, 0, 1+2*protBatch)
	}
	return nil
}

// protBatch is how many 256 KiB records of a large protected payload go
// out in one write: sealed into a staging buffer (aead), or tagged in the
// caller's buffer (mac), just before the write, so that the kernel's copy
// finds them still in cache.
const protBatch = 4

// tagLen is the tag each record carries, 0 under WireNone.
func (l *link) tagLen() int {
	if l.rp == nil {
		return 0
	}
	return tagLen
}

func (l *link) start() {
	go l.readLoop()
	go l.writeLoop()
}

// fail marks the link unusable with err (the first failure wins).
func (l *link) fail(err error) {
	l.failOnce.Do(func() {
		l.failErr = err
		close(l.failed)
		l.c.linkFailed(l)
	})
}

// err is why the link failed; call only after failed is closed.
func (l *link) err() error { return l.failErr }

func (l *link) peerErr(err error) error { return &transport.PeerError{Peer: l.peer, Err: err} }

// ---- writing ----

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
		putUint64(payload, uint64(mm.LocalBytes))
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

// kill drops the connection at once, as a dying process would.
func (l *link) kill() {
	_ = l.nc.SetLinger(0)
	_ = l.nc.Close()
	l.poll.close()
}

// ---- reading ----

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
				Remote: f.h, RemoteBytes: int(getUint64(b[:]))})
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
	if l.rp == nil && getUint32(b) == macMagic {
		why := ""
		if l.c.cfg.WireProtection == WireAuto {
			why = fmt.Sprintf(" (-wire-protection auto: this rank sees the link as within one host, rank %d as between hosts, as behind a NAT: set mac or none on every rank)", l.peer)
		}
		l.authFailed(fmt.Errorf("tcp rank %d: link to rank %d: %w: wire protection mismatch: rank %d sends MAC-protected frames (-wire-protection mac), this rank uses none%s",
			l.c.rank, l.peer, ErrWireAuth, l.peer, why))
		return
	}
	if l.rp == nil && getUint32(b) != frameMagic {
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

func putUint64(b []byte, v uint64) {
	_ = b[7]
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

func getUint32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func getUint64(b []byte) uint64 {
	_ = b[7]
	var v uint64
	for i := 0; i < 8; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v
}
