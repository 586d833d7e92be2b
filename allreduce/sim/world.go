package sim

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// World is a set of Config.Ranks simulated ranks connected pairwise, each
// with its virtual clock.
type World struct {
	cfg       Config
	size      int
	localSize int // ranks per node, size for one node
	timeout   time.Duration
	conns     []*Conn
	slowRank  int                // -1 for none
	slowLinks map[[2]int]float64 // product of the factors per directed link; nil if none

	// running counts the ranks that are neither closed nor blocked in a
	// receive or AlignClocks. It changes only under the rank's mu, and a
	// delivery that satisfies a blocked receive unblocks it under the same
	// lock, so running reaches 0 only when every open rank waits for
	// something nobody can send: a deadlock (or the world is closing).
	running atomic.Int64
	checkMu sync.Mutex // serialises deadlock checks

	failed     chan struct{} // closed when the first rank closes or aborts
	failOnce   sync.Once
	failedRank atomic.Int64

	// aborted is closed when the first rank aborts (Abort, not Close): as
	// in package inproc, every rank's blocked call then fails with that
	// rank's cause.
	aborted     chan struct{}
	abortOnce   sync.Once
	abortedRank atomic.Int64

	align alignState
	arena arena
	nics  *nicSet // the shared NICs (Config.NICs), nil for none
	memo  transport.Memo

	closeOnce sync.Once
	closeErr  error
}

// alignState is the AlignClocks barrier: ranks arrive at the current
// generation; the last one publishes the maximum clock and starts the next.
type alignState struct {
	mu      sync.Mutex
	arrived int
	gen     *alignGen
	last    float64 // the clocks the last generation set (0 before the first)
}

type alignGen struct {
	done chan struct{}
	max  float64 // the max of the arrived clocks; final once done is closed
}

// NewWorld makes the world cfg describes.
func NewWorld(cfg Config) (*World, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := cfg.Ranks
	w := &World{
		cfg:       cfg,
		size:      n,
		localSize: n,
		timeout:   cfg.Timeout,
		slowRank:  -1,
		failed:    make(chan struct{}),
		aborted:   make(chan struct{}),
	}
	if cfg.LocalSize > 0 && cfg.LocalSize < n {
		w.localSize = cfg.LocalSize
	}
	if w.timeout == 0 {
		w.timeout = DefaultTimeout
	}
	if cfg.SlowRank >= 0 && cfg.SlowFactor != 0 {
		w.slowRank = cfg.SlowRank
	}
	if len(cfg.SlowLinks) > 0 {
		w.slowLinks = make(map[[2]int]float64, len(cfg.SlowLinks))
		for _, s := range cfg.SlowLinks {
			k := [2]int{s.From, s.To}
			f, ok := w.slowLinks[k]
			if !ok {
				f = 1
			}
			w.slowLinks[k] = f * s.Factor
		}
	}
	w.failedRank.Store(-1)
	w.abortedRank.Store(-1)
	w.align.gen = &alignGen{done: make(chan struct{})}
	w.conns = make([]*Conn, n)
	for r := range w.conns {
		w.conns[r] = newConn(w, r)
	}
	if cfg.NICs > 0 && w.localSize < n {
		w.nics = newNICSet(w, cfg.NICs)
	}
	w.running.Store(int64(n))
	return w, nil
}

// Size is the number of ranks.
func (w *World) Size() int { return w.size }

// Conn returns rank's endpoint, or nil if rank is out of range.
func (w *World) Conn(rank int) *Conn {
	if rank < 0 || rank >= w.size {
		return nil
	}
	return w.conns[rank]
}

// Endpoints returns every rank's endpoint, by rank, as the transport.Conn
// that code written for any transport takes (allreducetest.RunRanks, the
// collective matrix): its *Conn, or with Config.Overlap the *Conn with
// the local endpoint's members (endpoints.go; ConnOf unwraps it).
func (w *World) Endpoints() []transport.Conn {
	out := make([]transport.Conn, len(w.conns))
	for r, c := range w.conns {
		out[r] = c
		if w.cfg.Overlap {
			out[r] = overlapConn{c} // two endpoints, as package mixed (ConnOf)
		}
	}
	return out
}

// Now is rank's virtual clock in seconds (0 for a rank out of range).
func (w *World) Now(rank int) float64 {
	if c := w.Conn(rank); c != nil {
		return c.Now()
	}
	return 0
}

// MaxNow is the latest virtual clock of every rank: the modelled time of
// everything the ranks did since 0 (or since an AlignClocks that every rank
// left at the same time).
func (w *World) MaxNow() float64 {
	m := 0.0
	for _, c := range w.conns {
		m = max(m, c.Now())
	}
	return m
}

// Buffer returns n bytes for a rank's buffer. In timing-only mode they lie
// in the world's virtual arena: one region shared by every rank and every
// call, which the transport never reads or writes (on linux and the BSDs
// an access faults), grown by a new mapping when a larger n is asked for
// and unmapped by Close; Buffer returns nil after Close or if the mapping
// fails. In real-payload mode Buffer is make([]byte, n).
func (w *World) Buffer(n int) []byte {
	if n < 0 {
		return nil
	}
	if !w.cfg.TimingOnly {
		return make([]byte, n)
	}
	return w.arena.buffer(n)
}

// Close closes every endpoint and unmaps the virtual arena.
func (w *World) Close() error {
	w.closeOnce.Do(func() {
		for _, c := range w.conns {
			_ = c.Close()
		}
		if err := w.arena.close(); err != nil {
			w.closeErr = fmt.Errorf("sim: unmapping the virtual arena: %w", err)
		}
	})
	return w.closeErr
}

// Kill makes rank fail as if its process died, with cause (Abort).
func (w *World) Kill(rank int, cause error) {
	if c := w.Conn(rank); c != nil {
		c.Abort(cause)
	}
}

// node is the node index of rank r.
func (w *World) node(r int) int { return r / w.localSize }

// cost is the link of a message from → to and the factor its α and β
// are multiplied by.
func (w *World) cost(from, to int) (l cost.Link, f float64) {
	l = w.cfg.Inter
	if w.node(from) == w.node(to) {
		l = w.cfg.Intra
	}
	f = 1.0
	if w.slowRank >= 0 && (from == w.slowRank || to == w.slowRank) {
		f *= w.cfg.SlowFactor
	}
	if w.slowLinks != nil {
		if g, ok := w.slowLinks[[2]int{from, to}]; ok {
			f *= g
		}
	}
	return l, f
}

func (w *World) noteFailure(rank int) {
	w.failOnce.Do(func() {
		w.failedRank.Store(int64(rank))
		close(w.failed)
	})
}

func (w *World) noteAbort(rank int) {
	w.abortOnce.Do(func() {
		w.abortedRank.Store(int64(rank))
		close(w.aborted)
	})
}

// Wait is what one blocked rank waited for when a deadlock was found.
type Wait struct {
	Rank   int
	From   int              // the rank it waits for a message from; -1 for AlignClocks, -2 for its other endpoint's time (AwaitClock)
	Header transport.Header // the header it expects (From >= 0)
	Bytes  int              // the length it expects (From >= 0)
}

func (wt Wait) String() string {
	switch wt.From {
	case -1:
		return fmt.Sprintf("rank %d waits in AlignClocks", wt.Rank)
	case -2:
		return fmt.Sprintf("rank %d waits for its other endpoint's time (a pipelined composition's stage)", wt.Rank)
	}
	return fmt.Sprintf("rank %d waits for a message from rank %d (%v, %d bytes)", wt.Rank, wt.From, wt.Header, wt.Bytes)
}

// DeadlockError is the error of every blocked call when the world
// deadlocked: every rank that is not closed waits, and nothing that could
// satisfy any of them is pending. Waits lists every blocked rank, by rank.
// It wraps transport.ErrTimeout.
type DeadlockError struct {
	Waits []Wait
}

// maxListedWaits bounds the waits Error spells out.
const maxListedWaits = 64

func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("sim: deadlock: ")
	for i, wt := range e.Waits {
		if i == maxListedWaits {
			fmt.Fprintf(&b, "; and %d more blocked ranks", len(e.Waits)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(wt.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, transport.ErrTimeout) true.
func (e *DeadlockError) Unwrap() error { return transport.ErrTimeout }

// checkDeadlock runs when running reached 0: with every rank's lock held
// (so nothing is delivered meanwhile) it confirms that every open rank is
// blocked and that none will be released by a peer's failure, then fails
// every blocked call at once with a DeadlockError.
func (w *World) checkDeadlock() {
	if w.nics.grantAtQuiescence(w) {
		return // a NIC's request goes on
	}
	w.checkMu.Lock()
	defer w.checkMu.Unlock()
	for _, c := range w.conns {
		c.mu.Lock()
	}
	defer func() {
		for _, c := range w.conns {
			c.mu.Unlock()
		}
	}()
	if w.running.Load() != 0 {
		return
	}
	select {
	case <-w.aborted:
		return // every blocked call fails with the abort
	default:
	}
	anyFailed := w.failedRank.Load() >= 0
	var waits []Wait
	for _, c := range w.conns {
		if c.closed {
			continue
		}
		for i := range c.lanesInUse() {
			ln := &c.lanes[i]
			if !ln.blocked {
				continue
			}
			switch {
			case ln.waitFrom == waitAlign:
				if anyFailed {
					return // AlignClocks fails with the peer's error
				}
				waits = append(waits, Wait{Rank: c.rank, From: -1})
			case ln.waitFrom == waitClock:
				waits = append(waits, Wait{Rank: c.rank, From: -2})
			case ln.waitFrom >= 0:
				if w.conns[ln.waitFrom].closed {
					return // this receive fails with the peer's error
				}
				waits = append(waits, Wait{Rank: c.rank, From: ln.waitFrom, Header: ln.waitH, Bytes: ln.waitN})
			}
		}
	}
	if len(waits) == 0 {
		return
	}
	dl := &DeadlockError{Waits: waits}
	for _, c := range w.conns {
		for i := range c.lanesInUse() {
			ln := &c.lanes[i]
			if ln.blocked && !c.closed && ln.waitFrom != waitNIC {
				ln.deadlock = fmt.Errorf("sim rank %d: %w", c.rank, dl)
				c.unblockLocked(ln)
				poke(ln.wake)
			}
		}
	}
}

// peerErr is the error of a call that cannot go on because rank r
// closed or aborted.
func (w *World) peerErr(r int) error {
	cause := w.conns[r].end.Cause()
	if cause == nil {
		cause = errors.New("failed")
	}
	return &transport.PeerError{Peer: r, Err: cause}
}

// coresBound is the earliest the ranks can have done the work counted
// since the previous alignment at time since, with Config.Cores set: since
// plus the busiest node's work divided by its cores (the allreduce
// package's cores bound, cost.Work); since itself without Cores. It resets
// the counts. The caller is the last rank into AlignClocks, every other
// rank waits in it, so no rank counts meanwhile.
func (w *World) coresBound(since float64) float64 {
	if w.cfg.Cores <= 0 {
		return since
	}
	node := make(map[int]float64)
	busiest := 0.0
	collective := 0
	for _, c := range w.conns {
		c.wmu.Lock()
		node[c.node] += c.work
		collective = max(collective, c.collective)
		c.work, c.collective = 0, 0
		c.wmu.Unlock()
		busiest = max(busiest, node[c.node])
	}
	if w.cfg.CacheWorkBytes > 0 && w.cfg.CacheWork > 0 && collective <= w.cfg.CacheWorkBytes {
		busiest *= w.cfg.CacheWork // Config.CacheWork: the collective's buffers fit the caches
	}
	return since + busiest/float64(w.cfg.Cores)
}
