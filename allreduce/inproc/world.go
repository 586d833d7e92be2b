package inproc

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/internal/stallnotes"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// DefaultTimeout is how long a blocking call waits without progress before
// it fails, unless WithTimeout says otherwise (gloo's default).
const DefaultTimeout = 30 * time.Second

// Option configures a World.
type Option func(*World)

// WithTimeout sets how long Send and Recv wait for a peer before failing
// with transport.ErrTimeout. d <= 0 keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(w *World) {
		if d > 0 {
			w.timeout = d
		}
	}
}

// WithLocalSize simulates nodes of k consecutive ranks each (the last
// smaller when k does not divide the world size: 7 ranks with k = 3 are
// nodes of 3, 3 and 1), for topology-aware algorithms: each Conn then
// names its node (NodeName) and reports its local rank and size. k <= 0
// leaves the world without a topology.
func WithLocalSize(k int) Option { return func(w *World) { w.localSize = max(k, 0) } }

// World is a set of Size in-process ranks connected pairwise.
type World struct {
	size      int
	localSize int // ranks per simulated node, 0 for none
	timeout   time.Duration
	conns     []*Conn
	links     []*link // links[from*size+to]

	failed     chan struct{} // closed when the first rank dies or closes
	failOnce   sync.Once
	failedRank atomic.Int64 // that rank, or -1

	// aborted is closed when the first rank aborts (Abort, not Close):
	// the world's collective is then over for everyone, so every rank's
	// blocked call fails with that rank's cause, even a call blocked on
	// a third rank that is alive but waiting in turn (a mismatch can tie
	// the survivors into a cycle that nothing else would break before
	// the timeout). A tcp endpoint does the same on an abort frame.
	aborted     chan struct{}
	abortOnce   sync.Once
	abortedRank atomic.Int64 // that rank, or -1

	stalls *stallnotes.Register // every rank's stall notice, shared by all
}

func (w *World) noteAbort(rank int) {
	w.abortOnce.Do(func() {
		w.abortedRank.Store(int64(rank))
		close(w.aborted)
	})
}

// firstAborted is the first rank that aborted, or -1.
func (w *World) firstAborted() int { return int(w.abortedRank.Load()) }

func (w *World) noteFailure(rank int) {
	w.failOnce.Do(func() {
		w.failedRank.Store(int64(rank))
		close(w.failed)
	})
}

// firstFailed is the first rank that died or closed, or -1.
func (w *World) firstFailed() int { return int(w.failedRank.Load()) }

// NewWorld connects n in-process ranks. n must be at least 1.
func NewWorld(n int, opts ...Option) (*World, error) {
	if n < 1 {
		return nil, fmt.Errorf("inproc: world size %d: %w (need at least 1 rank)", n, transport.ErrInvalid)
	}
	w := &World{size: n, timeout: DefaultTimeout, failed: make(chan struct{}), aborted: make(chan struct{}), stalls: stallnotes.New(n)}
	w.failedRank.Store(-1)
	w.abortedRank.Store(-1)
	for _, o := range opts {
		o(w)
	}
	w.links = make([]*link, n*n)
	for i := range w.links {
		w.links[i] = newLink()
	}
	w.conns = make([]*Conn, n)
	for r := range w.conns {
		w.conns[r] = &Conn{world: w, rank: r, end: lifecycle.New("inproc", r), wake: make(chan struct{}, 1)}
	}
	return w, nil
}

// Size is the number of ranks.
func (w *World) Size() int { return w.size }

// Conn returns rank's endpoint. It panics if rank is out of range, which is
// a programming error in the caller.
func (w *World) Conn(rank int) *Conn { return w.conns[rank] }

// Conns returns every rank's endpoint, by rank.
func (w *World) Conns() []*Conn { return append([]*Conn(nil), w.conns...) }

// Endpoints returns every rank's endpoint, by rank, as the transport.Conn
// that code written for any transport takes (allreducetest.RunRanks, the
// collective matrix).
func (w *World) Endpoints() []transport.Conn {
	out := make([]transport.Conn, len(w.conns))
	for r, c := range w.conns {
		out[r] = c
	}
	return out
}

// Kill makes rank fail as if its process died: its pending and later calls
// fail, and peers see a transport.PeerError carrying cause.
func (w *World) Kill(rank int, cause error) {
	w.conns[rank].Abort(cause)
}

// Close closes every endpoint.
func (w *World) Close() error {
	for _, c := range w.conns {
		_ = c.Close()
	}
	return nil
}

func (w *World) link(from, to int) *link { return w.links[from*w.size+to] }

// Fault is what happens to messages on one directed link.
type Fault struct {
	Delay time.Duration // each message waits this long before it is offered
	Drop  bool          // messages vanish: Send reports success, Recv never sees them
	Cut   bool          // the link is broken: both ends fail with transport.ErrPeer
	Err   error         // Send fails with this error
}

// SetFault installs f on the link from → to, replacing any earlier fault.
// The zero Fault heals the link (except Cut, which is permanent).
func (w *World) SetFault(from, to int, f Fault) error {
	if from < 0 || from >= w.size || to < 0 || to >= w.size {
		return fmt.Errorf("inproc: fault on link %d→%d: %w (world size %d)", from, to, transport.ErrInvalid, w.size)
	}
	l := w.link(from, to)
	l.mu.Lock()
	l.fault = f
	l.faulty.Store(true)
	l.mu.Unlock()
	if f.Cut {
		l.cutOnce.Do(func() { close(l.cut) })
	}
	return nil
}

// Link states. The sender moves idle → posted and done → idle; the
// receiver moves posted → taken → done; a sender giving up moves
// posted → idle if the receiver has not taken the buffer yet.
const (
	stateIdle uint32 = iota
	statePosted
	stateTaken
	stateDone
)

// link is one directed edge carrying at most one lent buffer at a time.
// Only its sender posts and only its receiver takes; each side owns one
// timer. Both sides first spin briefly (yielding the processor) on the state
// word and only then park on a wake channel: a parked goroutine woken by a
// peer is queued on the peer's processor, which with few cores serialises
// the ranks, and parking costs microseconds a small message cannot afford.
type link struct {
	state    atomic.Uint32
	h        transport.Header
	p        []byte
	verdict  error
	recvWake chan struct{} // capacity 1: poked after posting
	sendWake chan struct{} // capacity 1: poked after done

	cut       chan struct{}
	cutOnce   sync.Once
	mu        sync.Mutex
	fault     Fault
	faulty    atomic.Bool // a fault was ever set: currentFault must lock
	sendTimer *time.Timer
	recvTimer *time.Timer
}

func newLink() *link {
	l := &link{
		recvWake:  make(chan struct{}, 1),
		sendWake:  make(chan struct{}, 1),
		cut:       make(chan struct{}),
		sendTimer: time.NewTimer(time.Hour),
		recvTimer: time.NewTimer(time.Hour),
	}
	l.sendTimer.Stop()
	l.recvTimer.Stop()
	return l
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// spinFor spins a while, yielding the processor, until the state is want.
func (l *link) spinFor(want uint32) bool {
	for i := 0; i < spinRounds; i++ {
		if l.state.Load() == want {
			return true
		}
		runtime.Gosched()
	}
	return l.state.Load() == want
}

// spinRounds bounds the spinning before parking: a few tens of microseconds.
const spinRounds = 256

func (l *link) currentFault() Fault {
	if !l.faulty.Load() {
		return Fault{} // the common case: no fault was ever installed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fault
}
