package sim

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Conn is one rank's endpoint in a World, with its virtual clock. It
// implements transport.Conn, transport.Exchanger and transport.Aborter,
// but not transport.PeerMemory: every byte between ranks is a message
// with a modelled cost.
type Conn struct {
	world *World
	rank  int
	node  int

	// lanes are the rank's clocks: lanes[0] alone, except while the clock
	// is split (split, SplitClock: endpoints.go), when lanes[0] times the
	// calls with this node's ranks and lanes[1] those with other nodes'.
	lanes [2]lane
	split atomic.Bool // changed under mu, read without it

	// work is the seconds of a core this rank's sends (n·β at the link's
	// large-message rate) and reductions (n·γ) took since the last
	// AlignClocks (Config.Cores); collective is the largest collective
	// (bytes per rank, Config.CollectiveBytes) this rank sent a message
	// of since then (Config.CacheWork). Guarded by wmu.
	wmu        sync.Mutex
	work       float64
	collective int
	// published is the clock of the lane that sends between nodes
	// (nicLane), for the shared NICs to read without a lock (a lower
	// bound of this rank's next NIC request).
	published atomic.Uint64

	// nic is the shared NIC this rank sends inter-node messages through
	// (Config.NICs), and nicReq its request waiting for it, guarded by
	// the world's nicSet.mu.
	nic    int
	nicReq nicRequest

	// The inbox and the rank's state, guarded by mu (with each lane's
	// wait state).
	mu      sync.Mutex
	in      map[int]*fifo // pending messages by sender
	closed  bool          // closed or aborted (no lane counted in running)
	verdict error         // a mismatch a receiver found in this rank's message, for its next call

	end *lifecycle.End // Close or Abort
}

// lane is one clock of a rank, with the egress it sends by and the wait
// state of the calls that go by it.
type lane struct {
	// The virtual clock and the time the egress port is free again;
	// with Config.Ports ≥ 1, the times each port and each link (by
	// destination, made on the first send) are free again instead.
	// Guarded by tmu; now is clock, readable without it.
	tmu        sync.Mutex
	clock      float64
	egressFree float64
	portFree   []float64
	linkFree   []float64
	now        atomic.Uint64

	// The wait state, guarded by the Conn's mu.
	waitFrom int // waitNone, waitAlign, waitNIC, waitClock or the rank a receive waits for
	waitH    transport.Header
	waitN    int
	blocked  bool      // a call is blocked (the lane not counted in running)
	deadlock error     // set with the lane unblocked when the world deadlocked
	marks    []float64 // the other lane's times, posted and not yet awaited (PostClock)
	wake     chan struct{}

	timer *time.Timer // the real-time timeout of a blocking call
}

const (
	waitNone  = -1
	waitAlign = -2
	waitNIC   = -3
	waitClock = -4
)

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

// newConn is rank r's endpoint in w.
func newConn(w *World, r int) *Conn {
	c := &Conn{world: w, rank: r, node: r / w.localSize, in: map[int]*fifo{}, end: lifecycle.New("sim", r)}
	for i := range c.lanes {
		t := time.NewTimer(time.Hour)
		t.Stop()
		c.lanes[i].waitFrom, c.lanes[i].wake, c.lanes[i].timer = waitNone, make(chan struct{}, 1), t
	}
	return c
}

// Rank is this endpoint's rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the number of ranks in the world.
func (c *Conn) Size() int { return c.world.size }

// NodeName names this rank's node: "node0", "node1", ... (ranks
// r/LocalSize; every rank is on "node0" without Config.LocalSize).
func (c *Conn) NodeName() string { return fmt.Sprintf("node%d", c.node) }

// LocalRank is this rank's index on its node.
func (c *Conn) LocalRank() int { return c.rank - c.node*c.world.localSize }

// LocalSize is the number of ranks on this rank's node.
func (c *Conn) LocalSize() int {
	k := c.world.localSize
	return min(k, c.world.size-c.node*k)
}

// Now is this rank's virtual clock in seconds: while the clock is split
// (SplitClock), the later of its two.
func (c *Conn) Now() float64 {
	t := c.lanes[0].load()
	if c.split.Load() {
		t = max(t, c.lanes[1].load())
	}
	return t
}

// Advance adds d seconds of modelled local work (compute) to this rank's
// clock (to both while it is split). A d that is not a finite positive
// number is ignored.
func (c *Conn) Advance(d float64) {
	if !(d > 0) || math.IsInf(d, 1) {
		return
	}
	for i := range c.lanesInUse() {
		ln := &c.lanes[i]
		ln.tmu.Lock()
		c.storeClockLocked(ln, ln.clock+d)
		ln.tmu.Unlock()
	}
}

// load is the lane's clock, read without tmu.
func (ln *lane) load() float64 { return math.Float64frombits(ln.now.Load()) }

// lanesInUse is how many lanes are in use: lanes[0], and lanes[1] while
// the clock is split.
func (c *Conn) lanesInUse() int {
	if c.split.Load() {
		return 2
	}
	return 1
}

// laneFor is the lane of a call with rank peer: lanes[1] for a rank of
// another node while the clock is split, else lanes[0].
func (c *Conn) laneFor(peer int) *lane {
	if c.split.Load() && c.world.node(peer) != c.node {
		return &c.lanes[1]
	}
	return &c.lanes[0]
}

// nicLane is the lane that sends between nodes (a NIC's requests).
func (c *Conn) nicLane() *lane {
	if c.split.Load() {
		return &c.lanes[1]
	}
	return &c.lanes[0]
}

// storeClockLocked sets ln's clock, and publishes it if ln sends between
// nodes; the caller holds ln.tmu.
func (c *Conn) storeClockLocked(ln *lane, t float64) {
	ln.clock = t
	ln.now.Store(math.Float64bits(t))
	if ln == c.nicLane() {
		c.published.Store(math.Float64bits(t))
	}
}

// setClock sets ln's clock.
func (c *Conn) setClock(ln *lane, t float64) {
	ln.tmu.Lock()
	c.storeClockLocked(ln, t)
	ln.tmu.Unlock()
}

// publish raises the published clock to t, a time the clock is known to
// reach, for the shared NICs (nic.go).
func (c *Conn) publish(t float64) {
	for {
		old := c.published.Load()
		if math.Float64frombits(old) >= t || c.published.CompareAndSwap(old, math.Float64bits(t)) {
			return
		}
	}
}

// publishedClock is the clock as last stored: a lower bound of the
// clock, readable without tmu.
func (c *Conn) publishedClock() float64 { return math.Float64frombits(c.published.Load()) }

// addWork counts work seconds of a core (Config.Cores) and the
// collective of a message sent (collective > 0).
func (c *Conn) addWork(work float64, collective int) {
	c.wmu.Lock()
	c.work += work
	c.collective = max(c.collective, collective)
	c.wmu.Unlock()
}

// SharedMemo is the memo every rank of the world shares (transport.Memo):
// package allreduce makes Auto's choices once for all of them.
func (c *Conn) SharedMemo() *transport.Memo { return &c.world.memo }

// Virtual reports whether p lies in the world's virtual arena (timing-only
// mode): a payload the transport accounts but never reads or writes. An
// empty p is not virtual.
func (c *Conn) Virtual(p []byte) bool { return c.world.arena.contains(p) }

// VirtualBytes returns n bytes of the world's virtual arena in timing-only
// mode (World.Buffer), for scratch memory that only stands for bytes; it
// returns nil in real-payload mode.
func (c *Conn) VirtualBytes(n int) []byte {
	if !c.world.cfg.TimingOnly {
		return nil
	}
	return c.world.arena.buffer(n)
}

// Close fails pending and later calls on this endpoint with
// transport.ErrClosed; peers see a transport.PeerError.
func (c *Conn) Close() error {
	c.kill(transport.ErrClosed)
	return nil
}

// Abort marks this rank failed with cause: every rank's blocked call, and
// every later call on this rank or to it, fails at once (a peer sees a
// transport.PeerError carrying cause).
func (c *Conn) Abort(cause error) { c.kill(lifecycle.AbortCause(cause)) }

func (c *Conn) kill(cause error) {
	w := c.world
	zero := false
	c.end.Finish(cause, func() {
		c.mu.Lock()
		c.closed = true
		for i := range c.lanesInUse() {
			ln := &c.lanes[i]
			if !ln.blocked {
				zero = w.running.Add(-1) == 0
			}
		}
		for from, q := range c.in {
			q.drop()
			delete(c.in, from)
		}
		c.mu.Unlock()
	}, func() {
		w.noteFailure(c.rank)
		if !errors.Is(cause, transport.ErrClosed) {
			w.noteAbort(c.rank)
		}
		w.nics.ended(c)
		if zero {
			w.checkDeadlock()
		}
	})
}

// abortedErr is the error of a call cut short because a rank aborted.
func (c *Conn) abortedErr() error {
	r := int(c.world.abortedRank.Load())
	if r == c.rank {
		return c.end.Err()
	}
	return c.world.peerErr(r)
}

// enter checks a call's peer and this endpoint, and returns (once) the
// mismatch a receiver found in one of this rank's earlier messages.
func (c *Conn) enter(peers ...int) error {
	for _, p := range peers {
		if p < 0 || p >= c.world.size {
			return fmt.Errorf("sim: rank %d: %w (world size %d)", p, transport.ErrInvalid, c.world.size)
		}
	}
	select {
	case <-c.end.Dead():
		return c.end.Err()
	default:
	}
	c.mu.Lock()
	err := c.verdict
	c.verdict = nil
	c.mu.Unlock()
	return err
}
