package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// maxPendingHandshakes bounds the connections a listener authenticates at
// once; more are closed on arrival.
const maxPendingHandshakes = 64

// Dial joins the mesh of cfg.Size ranks as rank cfg.Rank and returns once
// it has an authenticated connection to every other rank.
//
// It listens on cfg.ListenAddr, publishes its address in cfg.Store under
// "ringddp/tcp/<RunID>/addr/<rank>", dials every lower rank (looking their
// addresses up in the store, retrying while they start) and accepts every
// higher one, then closes the listener. Every connection is authenticated
// in both directions (see the handshake in handshake.go). It fails with a
// clear error, on both sides where the other side can be told, for a wrong
// secret, another world size, run id or protocol version, or two processes
// claiming one rank; and after cfg.ConnectTimeout (or when ctx ends) with
// the ranks still missing and any connections it refused.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newConn(cfg)
	if cfg.Size == 1 {
		c.localRank, c.localSize = 0, 1
		c.ready.Store(true)
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("tcp rank %d: %w", cfg.Rank, err)
	}
	adv, err := advertiseAddr(ln.Addr().(*net.TCPAddr), cfg.AdvertiseAddr)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("tcp rank %d: %w", cfg.Rank, err)
	}
	if err := cfg.Store.Set(ctx, addrKey(cfg.RunID, cfg.Rank), []byte(adv)); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("tcp rank %d: publishing address %s: %w", cfg.Rank, adv, err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	m := &mesh{
		c:           c,
		ln:          ln,
		ctx:         mctx,
		cancel:      mcancel,
		p:           handshakeParams{secret: cfg.Secret, mode: cfg.mode(), size: cfg.Size, rank: cfg.Rank, runID: cfg.RunID},
		admitted:    make([]bool, cfg.Size),
		inflight:    make(map[net.Conn]struct{}),
		established: make(chan established, cfg.Size),
		fatal:       make(chan error, 1),
	}
	m.wg.Add(1)
	go m.acceptLoop()
	for q := 0; q < cfg.Rank; q++ {
		m.wg.Add(1)
		go m.dialPeer(q)
	}
	err = m.wait(ctx)
	m.stop()
	if err != nil {
		err = fmt.Errorf("tcp rank %d of %d: %w", cfg.Rank, cfg.Size, err)
		c.Abort(err)
		return nil, err
	}
	c.ready.Store(true)
	for _, l := range c.links {
		if l == nil {
			continue
		}
		select {
		case <-l.failed:
			err := fmt.Errorf("tcp rank %d of %d: rank %d failed while the mesh was forming: %w", cfg.Rank, cfg.Size, l.peer, l.err())
			c.Abort(err)
			return nil, err
		default:
		}
	}
	c.localRank, c.localSize = cfg.LocalRank, cfg.LocalSize
	if cfg.LocalSize == 0 {
		c.localRank, c.localSize = 0, 1
		for _, l := range c.links {
			if l != nil && l.local {
				c.localSize++
				if l.peer < c.rank {
					c.localRank++
				}
			}
		}
	}
	return c, nil
}

// advertiseAddr is the address peers should dial.
func advertiseAddr(la *net.TCPAddr, adv string) (string, error) {
	port := strconv.Itoa(la.Port)
	if adv != "" {
		if host, p, err := net.SplitHostPort(adv); err == nil {
			if p == "" || p == "0" {
				p = port
			}
			return net.JoinHostPort(host, p), nil
		}
		return net.JoinHostPort(strings.Trim(adv, "[]"), port), nil
	}
	if la.IP == nil || la.IP.IsUnspecified() {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return "", fmt.Errorf("listening on %v: set AdvertiseAddr (no host name: %v)", la, err)
		}
		return net.JoinHostPort(h, port), nil
	}
	return net.JoinHostPort(la.IP.String(), port), nil
}

type established struct {
	peer int
	nc   *net.TCPConn
}

// mesh is the state of one Dial.
type mesh struct {
	c      *Conn
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	p      handshakeParams
	wg     sync.WaitGroup

	mu       sync.Mutex
	admitted []bool
	inflight map[net.Conn]struct{} // handshakes under way, closed by stop
	stopped  bool
	notes    []string
	ignored  int

	established chan established
	fatal       chan error
}

func (m *mesh) fail(err error) {
	select {
	case m.fatal <- err:
	default:
	}
}

func (m *mesh) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.notes) < 8 {
		m.notes = append(m.notes, s)
	}
}

func (m *mesh) track(nc net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return false
	}
	m.inflight[nc] = struct{}{}
	return true
}

func (m *mesh) untrack(nc net.Conn) {
	m.mu.Lock()
	delete(m.inflight, nc)
	m.mu.Unlock()
}

func (m *mesh) handshakeDeadline() time.Time {
	d := time.Now().Add(HandshakeTimeout)
	if dl, ok := m.ctx.Deadline(); ok && dl.Before(d) {
		return dl
	}
	return d
}

func tune(nc *net.TCPConn, buf int) {
	_ = nc.SetNoDelay(true)
	if buf > 0 {
		_ = nc.SetReadBuffer(buf)
		_ = nc.SetWriteBuffer(buf)
	}
}

// wait collects connections until every peer is connected.
func (m *mesh) wait(ctx context.Context) error {
	c := m.c
	for got := 0; got < c.size-1; {
		select {
		case e := <-m.established:
			l := newLink(c, e.peer, e.nc)
			c.links[e.peer] = l
			l.start()
			got++
		case err := <-m.fatal:
			return err
		case l := <-c.setupFails:
			return fmt.Errorf("rank %d failed while the mesh was forming: %w", l.peer, l.err())
		case <-ctx.Done():
			return m.timeoutErr(ctx)
		}
	}
	return nil
}

func (m *mesh) timeoutErr(ctx context.Context) error {
	var missing []string
	for q, l := range m.c.links {
		if l == nil && q != m.c.rank {
			missing = append(missing, strconv.Itoa(q))
		}
	}
	m.mu.Lock()
	notes := slices.Clone(m.notes)
	ignored := m.ignored
	m.mu.Unlock()
	msg := fmt.Sprintf("no connection with rank(s) %s after %v: %v", strings.Join(missing, ", "), m.c.cfg.ConnectTimeout, ctx.Err())
	if len(notes) > 0 {
		msg += "; refused meanwhile: " + strings.Join(notes, "; ")
	}
	if ignored > 0 {
		msg += fmt.Sprintf("; dropped %d connection(s) that did not speak the protocol", ignored)
	}
	return errors.New(msg)
}

// stop ends the listener, the dialers and the handshakes under way, and
// closes connections that arrived too late.
func (m *mesh) stop() {
	m.cancel()
	_ = m.ln.Close()
	m.mu.Lock()
	m.stopped = true
	for nc := range m.inflight {
		_ = nc.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
	for {
		select {
		case e := <-m.established:
			_ = e.nc.Close()
		default:
			return
		}
	}
}

func (m *mesh) dialPeer(q int) {
	defer m.wg.Done()
	cfg := &m.c.cfg
	v, err := cfg.Store.Get(m.ctx, addrKey(cfg.RunID, q))
	if err != nil {
		if m.ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
			m.fail(fmt.Errorf("looking up rank %d's address: %w", q, err))
		}
		return
	}
	addr := string(v)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		m.fail(fmt.Errorf("rank %d published a malformed address %q: %w", q, untrusted.Printable(v), err))
		return
	}
	backoff := 10 * time.Millisecond
	var d net.Dialer
	for {
		nc, err := d.DialContext(m.ctx, "tcp", addr)
		if err == nil {
			tc := nc.(*net.TCPConn)
			if !m.track(tc) {
				_ = tc.Close()
				return
			}
			tune(tc, cfg.SocketBuffer)
			_ = tc.SetDeadline(m.handshakeDeadline())
			fatal, herr := dialHandshake(tc, &m.p, q)
			m.untrack(tc)
			if herr == nil {
				_ = tc.SetDeadline(time.Time{})
				m.established <- established{peer: q, nc: tc}
				return
			}
			_ = tc.Close()
			if fatal {
				m.fail(fmt.Errorf("rank %d at %s: %w", q, addr, herr))
				return
			}
			err = herr
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.ctx.Done():
			t.Stop()
			if errors.Is(m.ctx.Err(), context.DeadlineExceeded) {
				m.fail(fmt.Errorf("could not connect to rank %d at %s within %v (last error: %v)", q, addr, cfg.ConnectTimeout, err))
			}
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (m *mesh) acceptLoop() {
	defer m.wg.Done()
	sem := make(chan struct{}, maxPendingHandshakes)
	for {
		nc, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || m.ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of file descriptors, ...
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			_ = nc.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer func() { <-sem }()
			m.acceptOne(nc.(*net.TCPConn))
		}()
	}
}

func (m *mesh) acceptOne(nc *net.TCPConn) {
	if !m.track(nc) {
		_ = nc.Close()
		return
	}
	_ = nc.SetDeadline(m.handshakeDeadline())
	from, out, err := acceptHandshake(nc, &m.p, m.admit, m.release)
	m.untrack(nc)
	if out == acceptOK {
		tune(nc, m.c.cfg.SocketBuffer)
		_ = nc.SetDeadline(time.Time{})
		m.established <- established{peer: from, nc: nc}
		return
	}
	_ = nc.Close()
	switch out {
	case acceptFatal:
		m.fail(fmt.Errorf("connection from %v: %w", nc.RemoteAddr(), err))
	case acceptNote:
		m.note(fmt.Sprintf("%v (claiming rank %d): %v", nc.RemoteAddr(), from, err))
	default:
		m.mu.Lock()
		m.ignored++
		m.mu.Unlock()
	}
}

// admit registers an authenticated dialer's rank, or says why it cannot join.
func (m *mesh) admit(from int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case from <= m.p.rank || from >= m.p.size:
		return fmt.Sprintf("rank %d dialed rank %d, which accepts only ranks %d..%d (higher ranks dial lower ones)", from, m.p.rank, m.p.rank+1, m.p.size-1)
	case m.admitted[from]:
		return fmt.Sprintf("duplicate rank %d: rank %d already has a connection from a process claiming rank %d", from, m.p.rank, from)
	}
	m.admitted[from] = true
	return ""
}

func (m *mesh) release(from int) {
	m.mu.Lock()
	m.admitted[from] = false
	m.mu.Unlock()
}
