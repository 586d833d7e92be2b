package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSpin is Config.Spin's default.
const DefaultSpin = 2 * time.Millisecond

// spinMaxBytes: only receives of at most this many bytes make a link's
// reader poll. A wake-up costs tens of microseconds when ranks outnumber
// cores, a noticeable share of a transfer of up to about a millisecond
// (docs/multiprocess.md has the measured figures); larger messages lose it
// in their transfer time, and polling
// through them would take CPU from the peers moving them.
const spinMaxBytes = 1 << 20

// poller decides when a link's reader polls its socket instead of parking
// in the runtime's network poller, and wakes a parked reader when a
// receive begins.
//
// Why: on loopback a small message spends a few microseconds in the
// kernel, but a reader parked in the network poller is woken through
// epoll, the Go scheduler and, when the process's threads sleep, the
// operating system's scheduler; with several ranks per core that chain
// costs tens to a hundred microseconds per message, which is the whole
// latency of a small collective. MPI libraries poll instead (OpenMPI
// yields the core between polls when oversubscribed). So do we, for a
// bounded time: while a receive of at most spinMaxBytes is waiting on the
// link, for at most Config.Spin, the reader makes non-blocking reads and
// yields the processor to the operating system and to the Go scheduler
// between them (poll_linux.go). A receive that begins while the reader is
// parked kicks it out of the network poller by moving the read deadline
// into the past (an in-process wake-up, no system call on the peer's
// side); the reader restores the deadline and polls.
type poller struct {
	nc *net.TCPConn
	// file is a duplicate of nc's descriptor that the reader reads through
	// (poll_linux.go): unlike the net package's, its raw access reports a
	// deadline (a kick) without allocating an error. nil where unsupported:
	// the reader then reads nc, and never polls.
	file   *os.File
	epoch  time.Time
	budget int64 // nanoseconds; 0 never polls

	until  atomic.Int64 // poll until this many ns after epoch; 0: park
	parked atomic.Bool  // the reader is (about to be) in the network poller
	kicked atomic.Bool  // the read deadline was moved to wake the reader

	mu       sync.Mutex // orders changes of the read deadline
	deadline time.Time  // the read deadline the link wants (zero: none)
}

func newPoller(nc *net.TCPConn, budget time.Duration) *poller {
	p := &poller{nc: nc, epoch: time.Now(), budget: int64(max(budget, 0))}
	p.file = readFile(nc)
	if p.file == nil {
		p.budget = 0
	}
	return p
}

// setDeadline sets the read deadline where the reader reads.
func (p *poller) setDeadline(t time.Time) {
	if p.file != nil {
		_ = p.file.SetReadDeadline(t)
	} else {
		_ = p.nc.SetReadDeadline(t)
	}
}

// close closes the reader's descriptor (the socket closes with its last
// descriptor, so the link closes nc and this).
func (p *poller) close() {
	if p.file != nil {
		_ = p.file.Close()
	}
}

func (p *poller) now() int64 { return int64(time.Since(p.epoch)) }

// expect starts polling for a receive of n bytes, waking a parked reader.
func (p *poller) expect(n int) {
	if p.budget == 0 || n > spinMaxBytes {
		return
	}
	p.until.Store(p.now() + p.budget)
	if p.parked.Load() && p.kicked.CompareAndSwap(false, true) {
		p.mu.Lock()
		p.setDeadline(time.Unix(1, 0))
		p.mu.Unlock()
	}
}

// done stops polling: the receive is over.
func (p *poller) done() { p.until.Store(0) }

// hot reports whether the reader should poll now.
func (p *poller) hot() bool {
	u := p.until.Load()
	return u != 0 && p.now() < u
}

// setReadDeadline sets the link's read deadline (a kick's detour
// notwithstanding).
func (p *poller) setReadDeadline(t time.Time) {
	p.mu.Lock()
	p.deadline = t
	p.setDeadline(t)
	p.mu.Unlock()
}

// interrupt ends the reader's read for good: no more polling, and a read
// deadline in the past.
func (p *poller) interrupt() {
	p.until.Store(0)
	p.setReadDeadline(time.Unix(1, 0))
}

// unkick reports whether err is a kick's doing, and if so restores the
// read deadline.
func (p *poller) unkick(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || !p.kicked.CompareAndSwap(true, false) {
		return false
	}
	p.mu.Lock()
	p.setDeadline(p.deadline)
	p.mu.Unlock()
	return true
}

// sockReader is the io.Reader under a link's bufio.Reader.
type sockReader struct{ p *poller }

// Read reads what the socket has, at least one byte, polling while the
// link is hot (see poller); a kick never surfaces as an error.
func (r *sockReader) Read(b []byte) (int, error) {
	for {
		n, err := r.read(b)
		if err == nil || err == io.EOF {
			return n, err
		}
		if r.p.unkick(err) {
			if n > 0 {
				return n, nil
			}
			continue
		}
		if _, ok := err.(*net.OpError); ok {
			return n, err
		}
		return n, &net.OpError{Op: "read", Net: "tcp", Source: r.p.nc.LocalAddr(), Addr: r.p.nc.RemoteAddr(), Err: err}
	}
}
