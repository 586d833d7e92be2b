//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// Dial joins the shared-memory world cfg describes and returns this
// rank's endpoint once it has a link with every other rank.
//
// Steps: (1) create this rank's file (createRegion: a sealed memfd with
// the rings into this rank, allocated up front); (2) listen on an
// abstract Unix socket with a random name (no file in the file system;
// the name dies with the socket) and publish the name in cfg.Store;
// (3) dial every lower rank and accept every higher one; on each
// connection run the handshake (handshake.go), the dialer proving the
// secret first; (4) once both sides are authenticated, pass each side's
// file descriptor over the socket (SCM_RIGHTS, listener first), check and
// map the peer's file (mapPeerRegion), and confirm with one byte each
// way; (5) close the listener and every file descriptor: from then on
// this process holds only the mappings and one connected socket per peer,
// which a watcher goroutine reads to learn the moment the peer's process
// is gone.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newConn(cfg)
	if cfg.Size == 1 {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	own, fd, err := createRegion(&c.cfg)
	if err != nil {
		return nil, fmt.Errorf("shm rank %d of %d: %w", cfg.Rank, cfg.Size, err)
	}
	defer unix.Close(fd)
	c.own, c.bell = own, own.bell()
	fail := func(err error) (*Conn, error) {
		err = fmt.Errorf("shm rank %d of %d: %w", cfg.Rank, cfg.Size, err)
		c.Abort(err)
		return nil, err
	}
	name, err := socketName(cfg.RunID, cfg.Rank)
	if err != nil {
		return fail(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("listening on the abstract socket %q: %w", name, err))
	}
	if err := cfg.Store.Set(ctx, addrKey(cfg.RunID, cfg.Rank), []byte(name)); err != nil {
		_ = ln.Close()
		return fail(fmt.Errorf("publishing the socket name: %w", err))
	}
	m := &mesh{
		Setup: mpconn.NewSetup[*net.UnixConn](ctx, cfg.Size),
		c:     c, fd: fd, ln: ln,
		p: hsParams{secret: cfg.Secret, mode: modeHMAC, size: cfg.Size, rank: cfg.Rank,
			slots: cfg.Slots, slotLen: cfg.SlotSize, runID: cfg.RunID},
		est: make(chan *link, cfg.Size),
		rep: mpconn.NewReporter("shm", cfg.Rank, cfg.Log, cfg.ConnectTimeout),
	}
	if cfg.Insecure {
		m.p.mode = modeInsecure
	}
	err = m.Form(cfg.Rank, m.acceptLoop, m.dialPeer, func() error { return m.wait(ctx) }, m.stop)
	if err != nil {
		return fail(err)
	}
	for _, l := range c.core.Links {
		if l != nil {
			if err := l.check(); err != nil {
				return fail(fmt.Errorf("rank %d failed while the world was forming: %w", l.peer, err))
			}
		}
	}
	return c, nil
}

// socketName is a fresh abstract socket name ("@" is the leading NUL):
// the run id's hash, the rank and 64 random bits, so that no one can
// claim it in advance. Whoever can list this network namespace's sockets
// (/proc/net/unix) can see and connect to it, hence the handshake.
func socketName(runID string, rank int) (string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(runID))
	return fmt.Sprintf("@ringddp/shm/%s/%d/%s", hex.EncodeToString(h[:6]), rank, hex.EncodeToString(rnd[:])), nil
}

const (
	socketPrefix = "@ringddp/shm/"
	// maxPending bounds the accepted connections that have not yet
	// authenticated; a newcomer beyond it drops the oldest.
	maxPending = 64
)

// mesh is the state of one Dial. Its Setup tracks the handshakes under
// way (closed by stop) and the admitted ranks, and its mutex guards
// pending, turned and lastWhy too.
type mesh struct {
	*mpconn.Setup[*net.UnixConn]
	c  *Conn
	fd int // this rank's file, passed to every peer
	ln *net.UnixListener
	p  hsParams

	pending []*net.UnixConn // accepted, not yet authenticated, oldest first
	turned  int             // connections turned away
	lastWhy string          // the latest's source and reason
	rep     *mpconn.Reporter

	est chan *link
}

func (m *mesh) track(uc *net.UnixConn, pend bool) bool {
	m.Lock()
	defer m.Unlock()
	if !m.TrackLocked(uc) {
		return false
	}
	if pend {
		m.pending = append(m.pending, uc)
		if len(m.pending) > maxPending {
			_ = m.pending[0].Close() // its handshake fails
			m.pending = m.pending[1:]
		}
	}
	return true
}

func (m *mesh) authenticated(uc *net.UnixConn) {
	m.Lock()
	defer m.Unlock()
	for i, p := range m.pending {
		if p == uc {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			return
		}
	}
}

func (m *mesh) untrack(uc *net.UnixConn) {
	m.authenticated(uc)
	m.Untrack(uc)
}

// turnAway records, and reports at once (rate-limited, mpconn.Reporter),
// a connection turned away before it authenticated, failed with err,
// naming the process at its other end; connections closed by Dial's end
// are not reported.
func (m *mesh) turnAway(uc *net.UnixConn, err error) {
	if m.Ctx.Err() != nil {
		return
	}
	pid, uid := peerCred(uc)
	from, host := fmt.Sprintf("pid %d (uid %d)", pid, uid), fmt.Sprintf("processes of uid %d", uid)
	why := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, ErrAuth) && strings.Contains(why, "does not know the secret"):
		why = "authentication failed (wrong secret?)"
	case errors.As(err, &ne) && ne.Timeout():
		why = fmt.Sprintf("did not authenticate within %v (HandshakeTimeout)", m.c.cfg.HandshakeTimeout)
	case errors.Is(err, net.ErrClosed):
		why = fmt.Sprintf("dropped to make room: more than %d connections waited to authenticate (a flood?)", maxPending)
	}
	m.Lock()
	m.turned++
	m.lastWhy = from + ": " + why
	m.Unlock()
	m.rep.TurnedAway(from, host, why)
}

func (m *mesh) deadline() time.Time { return m.HandshakeDeadline(m.c.cfg.HandshakeTimeout) }

// wait collects links until every peer has one.
func (m *mesh) wait(ctx context.Context) error {
	c := m.c
	return mpconn.Gather(ctx, c.size-1, m.est, func(l *link) {
		c.core.Links[l.peer] = l
		l.start()
	}, m.Fatal(), nil, func() error {
		msg := fmt.Sprintf("no link with rank(s) %s after %v: %v", mpconn.Missing(c.core.Links, c.rank), c.cfg.ConnectTimeout, ctx.Err())
		m.Lock()
		if m.turned > 0 {
			msg += fmt.Sprintf("; turned away %d connection(s) before they authenticated, the latest from %s", m.turned, m.lastWhy)
		}
		m.Unlock()
		return errors.New(msg)
	}, c.cfg.progressEvery, func() {
		m.Lock()
		turned := m.turned
		m.Unlock()
		detail := ""
		if turned > 0 {
			detail = fmt.Sprintf("%d connection(s) turned away so far", turned)
		}
		m.rep.Waiting(mpconn.Missing(c.core.Links, c.rank), detail)
	})
}

// stop ends the listener, the dialers and the handshakes under way, and
// drops links that formed too late.
func (m *mesh) stop() {
	m.Stop(m.ln)
	mpconn.Drain(m.est, func(l *link) {
		_ = l.sock.Close()
		l.reg.unmap()
	})
}

func (m *mesh) acceptLoop() {
	for {
		uc, err := m.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || m.Ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors, ...
			continue
		}
		if !m.track(uc, true) {
			_ = uc.Close()
			return
		}
		m.WG.Add(1)
		go func() {
			defer m.WG.Done()
			l, err := m.acceptOne(uc)
			m.untrack(uc)
			if err != nil {
				m.turnAway(uc, err)
				_ = uc.Close()
				return
			}
			m.est <- l
		}()
	}
}

// acceptOne authenticates a dialer, then passes this rank's file first and
// maps the dialer's.
func (m *mesh) acceptOne(uc *net.UnixConn) (*link, error) {
	_ = uc.SetDeadline(m.deadline())
	from, err := listenHandshake(uc, &m.p, m.admit)
	if err != nil {
		return nil, err
	}
	m.authenticated(uc)
	l, err := m.exchangeFiles(uc, from, true)
	if err != nil {
		m.Release(from)
		return nil, err
	}
	return l, nil
}

func (m *mesh) admit(from int) string {
	if !m.Claim(from) {
		return fmt.Sprintf("duplicate rank %d: rank %d already has a link with a process claiming rank %d", from, m.p.rank, from)
	}
	return ""
}

// exchangeFiles passes this rank's file and receives the peer's (the
// listener sends first), maps the peer's, and confirms with one byte each
// way, so that both ends know both mappings exist.
func (m *mesh) exchangeFiles(uc *net.UnixConn, peer int, listener bool) (*link, error) {
	var fd int
	var err error
	if listener {
		if err = sendFD(uc, m.fd); err == nil {
			fd, err = recvFD(uc, peer)
		}
	} else {
		if fd, err = recvFD(uc, peer); err == nil {
			if err = sendFD(uc, m.fd); err != nil {
				_ = unix.Close(fd)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	reg, err := mapPeerRegion(fd, &m.c.cfg, peer)
	if err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err = uc.Write([]byte{'M'}); err == nil {
		_, err = uc.Read(b[:])
	}
	if err == nil && b[0] != 'M' {
		err = fmt.Errorf("%w: rank %d confirmed with %q", ErrProtocol, peer, b[:])
	}
	if err != nil {
		reg.unmap()
		return nil, fmt.Errorf("confirming the mappings with rank %d: %w", peer, err)
	}
	_ = uc.SetDeadline(time.Time{})
	return newLink(m.c, peer, reg, uc), nil
}

func (m *mesh) dialPeer(q int) {
	cfg := &m.c.cfg
	v, ok := m.LookUp(cfg.Store, addrKey(cfg.RunID, q), q, "socket")
	if !ok {
		return
	}
	name := string(v)
	if !strings.HasPrefix(name, socketPrefix) || len(name) > 107 {
		m.Fail(fmt.Errorf("rank %d published a malformed socket name %q", q, untrusted.Printable(v)))
		return
	}
	var d net.Dialer
	ctxErr, last := mpconn.Redial(m.Ctx, 5*time.Millisecond, func() (done, reset bool, err error) {
		nc, err := d.DialContext(m.Ctx, "unix", name)
		if err != nil {
			return false, false, err
		}
		uc := nc.(*net.UnixConn)
		if !m.track(uc, false) {
			_ = uc.Close()
			return true, false, nil
		}
		_ = uc.SetDeadline(m.deadline())
		var l *link
		err = dialHandshake(uc, &m.p, q)
		if err == nil {
			l, err = m.exchangeFiles(uc, q, false)
		}
		m.untrack(uc)
		if err == nil {
			m.est <- l
			return true, false, nil
		}
		_ = uc.Close()
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) {
			m.Fail(fmt.Errorf("rank %d: %w", q, err))
			return true, false, nil
		}
		return false, true, err
	})
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		m.Fail(fmt.Errorf("could not reach rank %d within %v (last error: %v)", q, cfg.ConnectTimeout, last))
	}
}
