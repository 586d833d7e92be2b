package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
)

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
// the ranks still missing and the connections it turned away (how many,
// why, from where). Each link gets the session key its handshake derived.
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
	formedBy, _ := ctx.Deadline()
	lc := net.ListenConfig{Control: listenControl(cfg.Congestion)}
	ln, err := lc.Listen(ctx, "tcp", cfg.ListenAddr)
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
	m := &mesh{
		Setup: mpconn.NewSetup[*net.TCPConn](ctx, cfg.Size),
		c:     c,
		ln:    ln,
		p: handshakeParams{secret: cfg.Secret, mode: cfg.mode(), size: cfg.Size, rank: cfg.Rank, runID: cfg.RunID,
			wire: wireCode(cfg.WireProtection), same: cfg.sameHost, verdictBy: formedBy},
		away:        turnedAway{hosts: make(map[string]int)},
		rep:         mpconn.NewReporter("tcp", cfg.Rank, cfg.Log, cfg.ConnectTimeout),
		dialing:     make([]string, cfg.Rank),
		established: make(chan established, cfg.Size),
	}
	err = m.Form(cfg.Rank, m.acceptLoop, m.dialPeer, func() error { return m.wait(ctx) }, m.stop)
	if err != nil {
		err = fmt.Errorf("tcp rank %d of %d: %w", cfg.Rank, cfg.Size, err)
		c.Abort(err)
		return nil, err
	}
	c.ready.Store(true)
	for _, l := range c.core.Links {
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
		for _, l := range c.core.Links {
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
	s    session
}

// mesh is the state of one Dial. Its Setup tracks the handshakes under
// way (closed by stop) and the admitted ranks, and its mutex guards the
// stages and away too.
type mesh struct {
	*mpconn.Setup[*net.TCPConn]
	c  *Conn
	ln net.Listener
	p  handshakeParams

	// quiet and spoken hold the accepted connections that have not proved
	// the secret yet (pending.go): quiet those without a well-formed hello
	// so far, spoken those with one.
	quiet, spoken stage
	arrivals      uint64 // connections accepted so far
	away          turnedAway
	rep           *mpconn.Reporter
	dialing       []string // what this rank knows of each lower rank it dials

	established chan established
}

// handshakeDeadline is when a handshake starting now must be over.
func (m *mesh) handshakeDeadline() time.Time {
	return m.HandshakeDeadline(m.c.cfg.HandshakeTimeout)
}

// tune sets a new connection's options under cfg: no Nagle delay, the
// socket buffers, the congestion control (congestion.go; checked by Dial,
// so a failure here leaves the host's).
func tune(nc *net.TCPConn, cfg *Config) {
	_ = nc.SetNoDelay(true)
	if buf := cfg.SocketBuffer; buf > 0 {
		_ = nc.SetReadBuffer(buf)
		_ = nc.SetWriteBuffer(buf)
	}
	same := cfg.sameHost
	if same == nil {
		same = sameHost
	}
	_ = setLinkCongestion(nc, congestionFor(cfg.Congestion, same, nc.LocalAddr(), nc.RemoteAddr()))
}

// wait collects connections until every peer is connected.
func (m *mesh) wait(ctx context.Context) error {
	c := m.c
	return mpconn.Gather(ctx, c.size-1, m.established, func(e established) {
		l := newLink(c, e.peer, e.nc, e.s)
		c.core.Links[e.peer] = l
		l.start()
	}, m.Fatal(), c.setupFails, func() error { return m.timeoutErr(ctx) }, c.cfg.progressEvery, m.progress)
}

func (m *mesh) timeoutErr(ctx context.Context) error {
	missing := mpconn.Missing(m.c.core.Links, m.c.rank)
	msg := fmt.Sprintf("no connection with rank(s) %s after %v: %v (%s)", missing, m.c.cfg.ConnectTimeout, ctx.Err(), m.waitingFor(false))
	m.Lock()
	away := m.away.String(m.c.cfg.HandshakeTimeout)
	m.Unlock()
	if away != "" {
		msg += "; " + away
	}
	return errors.New(msg)
}

// stop ends the listener, the dialers and the handshakes under way, and
// closes connections that arrived too late.
func (m *mesh) stop() {
	m.Stop(m.ln)
	mpconn.Drain(m.established, func(e established) { _ = e.nc.Close() })
}

func (m *mesh) dialPeer(q int) {
	cfg := &m.c.cfg
	v, ok := m.LookUp(cfg.Store, addrKey(cfg.RunID, q), q, "address")
	if !ok {
		return
	}
	addr := string(v)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		m.Fail(fmt.Errorf("rank %d published a malformed address %q: %w", q, untrusted.Printable(v), err))
		return
	}
	m.setDialing(q, "at "+addr+": connecting")
	d := net.Dialer{Control: dialControl(cfg.Congestion)}
	ctxErr, last := mpconn.Redial(m.Ctx, 10*time.Millisecond, func() (done, reset bool, err error) {
		nc, err := d.DialContext(m.Ctx, "tcp", addr)
		if err != nil {
			m.setDialing(q, fmt.Sprintf("at %s: %v", addr, err))
			return false, false, err
		}
		tc := nc.(*net.TCPConn)
		if !m.Track(tc) {
			_ = tc.Close()
			return true, false, nil
		}
		tune(tc, cfg)
		_ = tc.SetDeadline(m.handshakeDeadline())
		s, fatal, herr := dialHandshake(tc, &m.p, q)
		m.Untrack(tc)
		if herr == nil {
			_ = tc.SetDeadline(time.Time{})
			m.established <- established{peer: q, nc: tc, s: s}
			return true, false, nil
		}
		_ = tc.Close()
		if fatal {
			m.Fail(fmt.Errorf("rank %d at %s: %w", q, addr, herr))
			return true, false, nil
		}
		// The listener is up but this connection broke (dropped while
		// strangers flooded it, or too slow): retry soon.
		m.setDialing(q, fmt.Sprintf("at %s: handshake: %v", addr, herr))
		return false, true, herr
	})
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		m.Fail(fmt.Errorf("could not connect to rank %d at %s within %v (last error: %v)", q, addr, cfg.ConnectTimeout, last))
	}
}

func (m *mesh) acceptLoop() {
	for {
		nc, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || m.Ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of file descriptors, ...
			continue
		}
		pc, ok := m.pend(nc.(*net.TCPConn))
		if !ok {
			_ = nc.Close()
			return
		}
		m.WG.Add(1)
		go func() {
			defer m.WG.Done()
			m.acceptOne(pc)
		}()
	}
}

func (m *mesh) acceptOne(pc *pending) {
	nc := pc.nc
	_ = nc.SetDeadline(m.handshakeDeadline())
	res, err := acceptHandshake(nc, &m.p, acceptHooks{
		spoke:         func() { m.spoke(pc) },
		authenticated: func() bool { return m.authenticated(pc) },
		admit:         m.admit,
		release:       m.Release,
	})
	dropped, stopped := m.finish(pc)
	if res.out == acceptOK {
		tune(nc, &m.c.cfg)
		_ = nc.SetDeadline(time.Time{})
		m.established <- established{peer: res.from, nc: nc, s: res.s}
		return
	}
	_ = nc.Close()
	if res.out == acceptFatal {
		m.Fail(fmt.Errorf("connection from %v: %w", nc.RemoteAddr(), err))
		return
	}
	if stopped {
		return
	}
	m.turnAway(nc.RemoteAddr(), dropped, res, err)
}

// admit registers an authenticated dialer's rank, or says why it cannot join.
func (m *mesh) admit(from int) string {
	switch {
	case from <= m.p.rank || from >= m.p.size:
		return fmt.Sprintf("rank %d dialed rank %d, which accepts only ranks %d..%d (higher ranks dial lower ones)", from, m.p.rank, m.p.rank+1, m.p.size-1)
	case !m.Claim(from):
		return fmt.Sprintf("duplicate rank %d: rank %d already has a connection from a process claiming rank %d", from, m.p.rank, from)
	}
	return ""
}
