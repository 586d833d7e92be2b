package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
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

// newLink makes the link to peer over nc, whose handshake gave s: the
// link's session key and the wire protection both ends resolved for it;
// it is started with start. A link that cannot be protected as agreed is
// returned failed.
func newLink(c *Conn, peer int, nc *net.TCPConn, s session) *link {
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
	l.mode = s.mode
	l.magic = magicOf(l.mode)
	l.rtimer.Stop()
	if err := l.protect(l.mode, s.key); err != nil {
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

// kill drops the connection at once, as a dying process would.
func (l *link) kill() {
	_ = l.nc.SetLinger(0)
	_ = l.nc.Close()
	l.poll.close()
}
