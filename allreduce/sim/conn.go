package sim

import (
	"context"
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

	// The virtual clock and the time the egress port is free again;
	// with Config.Ports ≥ 1, the times each port and each link (by
	// destination, made on the first send) are free again instead.
	tmu        sync.Mutex
	clock      float64
	egressFree float64
	portFree   []float64
	linkFree   []float64
	// work is the seconds of a core this rank's sends (n·β at the link's
	// large-message rate) and reductions (n·γ) took since the last
	// AlignClocks (Config.Cores).
	work float64
	// collective is the largest collective (bytes per rank,
	// Config.CollectiveBytes) this rank sent a message of since the last
	// AlignClocks (Config.CacheWork).
	collective int
	// published is clock, for the shared NICs to read without tmu (a
	// lower bound of this rank's next NIC request).
	published atomic.Uint64

	// nic is the shared NIC this rank sends inter-node messages through
	// (Config.NICs), and nicReq its request waiting for it, guarded by
	// the world's nicSet.mu.
	nic    int
	nicReq nicRequest

	// The inbox and the rank's wait state, guarded by mu.
	mu       sync.Mutex
	in       map[int]*fifo // pending messages by sender
	waitFrom int           // waitNone, waitAlign, waitNIC or the rank a receive waits for
	waitH    transport.Header
	waitN    int
	blocked  bool  // a receive or AlignClocks is blocked (not counted in running)
	closed   bool  // closed or aborted (not counted in running)
	verdict  error // a mismatch a receiver found in this rank's message, for its next call
	deadlock error // set with the rank unblocked when the world deadlocked
	wake     chan struct{}

	end *lifecycle.End // Close or Abort

	timer *time.Timer // the real-time timeout of a blocking call
}

const (
	waitNone  = -1
	waitAlign = -2
	waitNIC   = -3
)

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

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

// Now is this rank's virtual clock in seconds.
func (c *Conn) Now() float64 {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	return c.clock
}

// Advance adds d seconds of modelled local work (compute) to this rank's
// clock. A d that is not a finite positive number is ignored.
func (c *Conn) Advance(d float64) {
	if !(d > 0) || math.IsInf(d, 1) {
		return
	}
	c.tmu.Lock()
	c.storeClockLocked(c.clock + d)
	c.tmu.Unlock()
}

// storeClockLocked sets the clock and publishes it; the caller holds tmu.
func (c *Conn) storeClockLocked(t float64) {
	c.clock = t
	c.published.Store(math.Float64bits(t))
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
		if !c.blocked {
			zero = w.running.Add(-1) == 0
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

// Send posts p to rank to: eagerly, so it returns at once (the payload is
// copied unless it is virtual). The clock advances by the time p occupies
// this rank's egress port; with Config.Ports ≥ 1, to the time a port
// takes p.
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if err := c.enter(to); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.tmu.Lock()
	defer c.tmu.Unlock()
	alpha := 1.0
	if c.world.cfg.LoneAlpha > 0 {
		alpha = c.world.cfg.LoneAlpha // a lone send: Config.LoneAlpha
	}
	done, err := c.post(ctx, to, h, p, c.clock, 1, alpha)
	if err != nil {
		return err
	}
	c.storeClockLocked(done)
	return nil
}

// Recv receives the next message from rank from into sink. The clock
// becomes the later of itself and the message's arrival, plus n·Gamma if
// sink reduces (is not a transport.Placer).
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	if err := c.enter(from); err != nil {
		return err
	}
	if err := checkRecv(n, sink); err != nil {
		return err
	}
	t := c.Now()
	done, err := c.receive(ctx, from, h, n, sink, t)
	if err != nil {
		return err
	}
	c.tmu.Lock()
	c.storeClockLocked(done)
	c.tmu.Unlock()
	return nil
}

// Exchange sends sp to rank to and receives n bytes from rank from, both
// starting at the current clock; the clock becomes the later of the two
// ends.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if err := c.enter(to, from); err != nil {
		return err
	}
	if err := checkRecv(n, sink); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.tmu.Lock()
	t := c.clock
	work := 1.0
	if to == from && c.world.cfg.ExchangeWork > 0 {
		work = c.world.cfg.ExchangeWork // a pairwise exchange: Config.ExchangeWork
	}
	sent, err := c.post(ctx, to, sh, sp, t, work, 1)
	c.tmu.Unlock()
	if err != nil {
		return err
	}
	recvd, err := c.receive(ctx, from, rh, n, sink, t)
	if err != nil {
		return err
	}
	c.tmu.Lock()
	c.storeClockLocked(max(sent, recvd))
	c.tmu.Unlock()
	return nil
}

func checkRecv(n int, sink transport.Sink) error {
	if n < 0 {
		return fmt.Errorf("sim: receive of %d bytes: %w", n, transport.ErrInvalid)
	}
	if sink == nil && n > 0 {
		return fmt.Errorf("sim: receive of %d bytes into a nil sink: %w", n, transport.ErrInvalid)
	}
	return nil
}

// post queues a copy of p (or, if p is virtual, its length) for rank to,
// sent at clock t, and returns when the sender may go on: when the egress
// port is done with it, or with Config.Ports ≥ 1 when a port took it. A
// message between nodes with Config.NICs set first waits for its NIC
// (nic.go), which may delay its start. It arrives α·f·alpha after its
// transfer (alpha: Config.LoneAlpha for a lone send, else 1). Its work
// (Config.Cores) is n·β·f times work. The caller holds tmu.
func (c *Conn) post(ctx context.Context, to int, h transport.Header, p []byte, t, work, alpha float64) (float64, error) {
	w := c.world
	l, f := w.cost(c.rank, to)
	tx := transfer(l, len(p), f)
	start, port := max(t, c.egressFree), -1
	if k := w.cfg.Ports; k > 0 {
		if c.portFree == nil {
			c.portFree, c.linkFree = make([]float64, k), make([]float64, w.size)
		}
		port = 0 // the port free first, the lowest on a tie
		for i, x := range c.portFree {
			if x < c.portFree[port] {
				port = i
			}
		}
		start = max(t, c.portFree[port], c.linkFree[to])
	}
	ready := start
	if w.nics.crosses(c, to) {
		var err error
		if start, err = w.nics.acquire(ctx, c, ready, tx); err != nil {
			return 0, err
		}
	}
	m := message{h: h, n: len(p), arrival: start + l.Alpha*f*alpha + tx}
	if w.arena.contains(p) {
		m.virtual = true
	} else if len(p) > 0 {
		m.buf = getBuf(len(p))
		copy(*m.buf, p)
	}
	d := w.conns[to]
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		m.release()
		return 0, w.peerErr(to)
	}
	q := d.in[c.rank]
	if q == nil {
		q = &fifo{}
		d.in[c.rank] = q
	}
	q.push(m)
	if d.blocked && d.waitFrom == c.rank {
		d.unblockLocked()
		poke(d.wake)
	}
	d.mu.Unlock()
	c.work += float64(len(p)) * l.Beta * f * work // at the large-message rate: Config.Cores
	if w.cfg.CollectiveBytes != nil {
		c.collective = max(c.collective, w.cfg.CollectiveBytes(h))
	}
	if port >= 0 {
		c.portFree[port], c.linkFree[to] = start+tx, start+tx
		return ready, nil
	}
	c.egressFree = start + tx
	return c.egressFree, nil
}

// blockLocked marks a blocked wait; the caller holds mu and must call
// checkDeadlock after unlocking if it returns true.
func (c *Conn) blockLocked(from int, h transport.Header, n int) bool {
	c.blocked, c.waitFrom, c.waitH, c.waitN = true, from, h, n
	c.deadlock = nil
	if c.closed {
		return false
	}
	return c.world.running.Add(-1) == 0
}

// unblockLocked ends a blocked wait; the caller holds mu.
func (c *Conn) unblockLocked() {
	if !c.blocked {
		return
	}
	c.blocked, c.waitFrom = false, waitNone
	if !c.closed {
		c.world.running.Add(1)
	}
}

// leave ends a wait that failed with err and returns err.
func (c *Conn) leave(err error) error {
	c.mu.Lock()
	c.unblockLocked()
	c.deadlock = nil
	c.mu.Unlock()
	return err
}

// receive takes the next message from rank from, started at clock t, and
// returns the clock at which it is done.
func (c *Conn) receive(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink, t float64) (float64, error) {
	m, err := c.next(ctx, from, h, n)
	if err != nil {
		return 0, err
	}
	if m.h != h || m.n != n {
		m.release()
		c.world.conns[from].report(&transport.MismatchError{Rank: from, Peer: c.rank, Local: m.h, LocalBytes: m.n, Remote: h, RemoteBytes: n})
		return 0, &transport.MismatchError{Rank: c.rank, Peer: from, Local: h, LocalBytes: n, Remote: m.h, RemoteBytes: m.n}
	}
	done := max(t, m.arrival)
	placer, isPlacer := sink.(transport.Placer)
	if !isPlacer {
		reduce := float64(n) * c.world.cfg.Gamma
		done += reduce
		c.tmu.Lock()
		c.work += reduce
		c.tmu.Unlock()
	}
	if m.buf != nil {
		if isPlacer {
			if dst := placer.Place(n); !c.world.arena.contains(dst) {
				copy(dst, *m.buf)
			}
		} else {
			sink.Consume(0, *m.buf)
		}
		m.release()
	}
	return done, nil
}

// next pops the next message from rank from, waiting for it if need be.
func (c *Conn) next(ctx context.Context, from int, h transport.Header, n int) (message, error) {
	w := c.world
	c.mu.Lock()
	if err := c.verdict; err != nil {
		// Reported since enter looked.
		c.verdict = nil
		c.mu.Unlock()
		return message{}, err
	}
	if m, ok := c.popLocked(from); ok {
		c.mu.Unlock()
		return m, nil
	}
	peer := w.conns[from]
	zero := c.blockLocked(from, h, n)
	c.mu.Unlock()
	if zero {
		w.checkDeadlock()
	}
	c.timer.Reset(w.timeout)
	defer c.timer.Stop()
	for {
		select {
		case <-c.wake:
			c.mu.Lock()
			if err := c.deadlock; err != nil {
				c.deadlock = nil
				c.unblockLocked()
				c.mu.Unlock()
				return message{}, err
			}
			if err := c.verdict; err != nil {
				c.verdict = nil
				c.unblockLocked()
				c.mu.Unlock()
				return message{}, err
			}
			if m, ok := c.popLocked(from); ok {
				c.unblockLocked()
				c.mu.Unlock()
				return m, nil
			}
			c.mu.Unlock()
		case <-ctx.Done():
			return message{}, c.leave(ctx.Err())
		case <-c.end.Dead():
			return message{}, c.leave(c.end.Err())
		case <-peer.end.Dead():
			if m, ok := c.popAndLeave(from); ok {
				return m, nil
			}
			return message{}, c.leave(w.peerErr(from))
		case <-w.aborted:
			if m, ok := c.popAndLeave(from); ok {
				return m, nil
			}
			return message{}, c.leave(c.abortedErr())
		case <-c.timer.C:
			return message{}, c.leave(&transport.TimeoutError{Peer: from, What: "recv", After: w.timeout.String()})
		}
	}
}

func (c *Conn) popLocked(from int) (message, bool) {
	q := c.in[from]
	if q == nil {
		return message{}, false
	}
	return q.pop()
}

// popAndLeave ends the wait with the message if it came after all.
func (c *Conn) popAndLeave(from int) (message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.popLocked(from)
	if ok {
		c.unblockLocked()
		c.deadlock = nil
	}
	return m, ok
}

// report hands this rank (the sender of a refused message) the mismatch,
// for its blocked receive or its next call.
func (c *Conn) report(err error) {
	c.mu.Lock()
	if c.verdict == nil {
		c.verdict = err
	}
	if c.blocked && c.waitFrom >= 0 {
		c.unblockLocked()
		poke(c.wake)
	}
	c.mu.Unlock()
}
