package rendezvous

import (
	"errors"
	"net"
	"time"
)

// hostOf is the host part of a remote address.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return "?"
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// abort closes c at once, with a reset rather than an orderly close, so
// that a flood of strangers leaves no TIME_WAIT sockets behind.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (s *StoreServer) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (out of file descriptors, ...): back off.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(s.cfg.MaxUnreadReplyBytes)
		}
		sc := &serverConn{Conn: c, host: hostOf(c.RemoteAddr())}
		// The handshake's deadline, set before an eviction can cut it
		// short.
		_ = c.SetDeadline(time.Now().Add(min(s.cfg.HandshakeTimeout, s.cfg.Timeout)))
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			continue
		}
		if s.pending.Len() >= s.cfg.MaxPending || len(s.conns) >= s.cfg.MaxConns {
			if s.evictLocked(sc.host) == nil {
				// Every connection has authenticated: only secret holders
				// hold the slots, so the newcomer goes.
				s.turned.note(turnRefused, sc.host)
				s.mu.Unlock()
				abort(c)
				continue
			}
		}
		sc.elem = s.pending.PushBack(sc)
		s.byHost[sc.host]++
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(sc)
	}
}

// evictLocked makes room for a newcomer from host newcomer by evicting a
// pending connection: it no longer counts against the limits, and its
// handshake is cut short (its goroutine closes it). It returns the
// connection, or nil when nothing is pending. Called with mu held. The
// victim, so that a flood from one host evicts only its own connections:
//
//  1. Count the newcomer with its host's pending connections. If that
//     host then has at least as many as any other, and has one pending
//     already, its own oldest goes: a host can take another's slot only
//     while it holds fewer.
//  2. Otherwise the oldest pending connection of the host with the most
//     goes (among hosts tied for the most, the oldest connection).
//
// So a host holding no more than its share of the pending slots keeps
// them however fast another host connects. Many hosts with one connection
// each (step 2 among ties) lose their oldest first.
//
// The handshake is interrupted rather than the connection closed: one
// whose handshake has already succeeded (the client holds the server's
// final message) is admitted after all, so a client never finds the
// connection it authenticated closed under it.
func (s *StoreServer) evictLocked(newcomer string) *serverConn {
	most := 0
	for _, n := range s.byHost {
		most = max(most, n)
	}
	victim := func(sc *serverConn) bool { return s.byHost[sc.host] == most }
	if own := s.byHost[newcomer]; own > 0 && own+1 >= most {
		victim = func(sc *serverConn) bool { return sc.host == newcomer }
	}
	for e := s.pending.Front(); e != nil; e = e.Next() {
		sc := e.Value.(*serverConn)
		if victim(sc) {
			s.unpendLocked(sc)
			sc.evicted = true
			delete(s.conns, sc)
			_ = sc.SetDeadline(time.Unix(1, 0))
			return sc
		}
	}
	return nil
}

// unpendLocked takes sc off the pending list; called with mu held.
func (s *StoreServer) unpendLocked(sc *serverConn) {
	s.pending.Remove(sc.elem)
	sc.elem = nil
	if s.byHost[sc.host]--; s.byHost[sc.host] <= 0 {
		delete(s.byHost, sc.host)
	}
}

func (s *StoreServer) serve(sc *serverConn) {
	defer s.wg.Done()
	defer s.drop(sc)
	key, err := serverHandshake(sc.Conn, s.cfg.Secret, s.mode)
	if !s.admit(sc, err) {
		return
	}
	l, err := newStoreLink(sc.Conn, key, false)
	if err == nil {
		s.serveRequests(l)
	}
}

// admit ends sc's authentication with the handshake's outcome and reports
// whether to serve it.
func (s *StoreServer) admit(sc *serverConn, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc.elem != nil {
		s.unpendLocked(sc)
	}
	switch {
	case s.closed:
		return false
	case sc.evicted && err == nil:
		// Authenticated just as it was evicted: keep it, over the limits
		// for a moment.
		sc.evicted = false
		s.conns[sc] = struct{}{}
	case sc.evicted:
		s.turned.note(turnEvicted, sc.host)
		return false
	case err != nil && isAuthErr(err):
		s.turned.note(turnRejected, sc.host)
		return false
	case err != nil:
		s.turned.note(turnAbandoned, sc.host)
		sc.reset = true
		return false
	}
	return true
}

// drop forgets and closes a connection whose goroutine ends.
func (s *StoreServer) drop(sc *serverConn) {
	s.mu.Lock()
	if sc.elem != nil {
		s.unpendLocked(sc)
	}
	delete(s.conns, sc)
	reset := sc.evicted || sc.reset
	s.mu.Unlock()
	if reset {
		abort(sc.Conn)
	} else {
		_ = sc.Close()
	}
}
