package rendezvous

import (
	"cmp"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// StoreConfig configures a StoreServer and its TCPStore clients. Zero
// fields take their defaults.
type StoreConfig struct {
	// Secret authenticates every connection (both directions). Required
	// unless Insecure.
	Secret []byte
	// Insecure runs without authentication: an explicit opt-out, for
	// tests and trusted single-user machines. Both ends must agree.
	Insecure bool
	// Timeout bounds every client call (a Get waits at most this long for
	// its key) when the caller's context has no earlier deadline. On the
	// server it is the job's timeout: no Get waits longer, whatever wait
	// the client asks for. Default DefaultTimeout.
	Timeout time.Duration
	// HandshakeTimeout bounds the authentication of a new connection, on
	// both ends: the server closes a connection that has not proved the
	// secret by then. Default DefaultStoreHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IOTimeout bounds, on the server, reading the rest of a request once
	// its first byte has arrived, and writing a reply. Default
	// DefaultStoreIOTimeout; never more than Timeout.
	IOTimeout time.Duration
	// MaxValueLen is the longest value accepted (server) or read (client).
	// Default DefaultMaxValueLen.
	MaxValueLen int
	// MaxConns bounds the server's open connections, authenticated or not.
	// Default DefaultMaxConns.
	MaxConns int
	// MaxPending bounds the server's connections that have not
	// authenticated yet. A connection arriving at this limit, or at
	// MaxConns, is not refused: the server closes the oldest pending
	// connection of the remote host with the most pending connections (the
	// oldest of all when one host floods) to make room, so that strangers
	// holding connections open cannot crowd out a rank. Only when every
	// one of MaxConns connections has authenticated is the newcomer
	// refused. Default DefaultMaxPending.
	MaxPending int
	// MaxInFlightBytes bounds the request bodies (keys and values) the
	// server holds at once, over all its connections: a request that would
	// pass it is refused with an error wrapping ErrLimit before anything is
	// allocated for it. Default DefaultMaxInFlightBytes.
	MaxInFlightBytes int64
	// MaxKeys bounds the keys the server stores: a Set or Add making a key
	// beyond it fails with ErrLimit. Default DefaultMaxKeys.
	MaxKeys int
	// MaxStoredBytes bounds the bytes the server stores, counted as
	// len(key) + len(value) + EntryOverhead per key: a Set or Add passing
	// it fails with ErrLimit. Default DefaultMaxStoredBytes.
	MaxStoredBytes int64
}

// Defaults of StoreConfig.
const (
	// DefaultStoreHandshakeTimeout is StoreConfig.HandshakeTimeout's
	// default: authenticating takes one round trip and two HMACs.
	DefaultStoreHandshakeTimeout = 2 * time.Second
	// DefaultStoreIOTimeout is StoreConfig.IOTimeout's default.
	DefaultStoreIOTimeout = 10 * time.Second
	// DefaultMaxConns is StoreConfig.MaxConns's default.
	DefaultMaxConns = 1024
	// DefaultMaxPending is StoreConfig.MaxPending's default.
	DefaultMaxPending = 64
	// DefaultMaxInFlightBytes is StoreConfig.MaxInFlightBytes's default: a
	// rendezvous moves kilobytes.
	DefaultMaxInFlightBytes = 16 << 20
)

func (c StoreConfig) withDefaults() StoreConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultStoreHandshakeTimeout
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = DefaultStoreIOTimeout
	}
	c.IOTimeout = min(c.IOTimeout, c.Timeout)
	if c.MaxValueLen <= 0 {
		c.MaxValueLen = DefaultMaxValueLen
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxStoredBytes <= 0 {
		c.MaxStoredBytes = DefaultMaxStoredBytes
	}
	return c
}

// checkServerLimits rejects limits a server cannot work with; c has its
// defaults.
func (c StoreConfig) checkServerLimits() error {
	if int64(c.MaxValueLen) > math.MaxUint32 {
		return fmt.Errorf("%w: MaxValueLen %d is beyond the protocol's 4 GiB", ErrInvalid, c.MaxValueLen)
	}
	if need := int64(MaxKeyLen) + int64(c.MaxValueLen); need > c.MaxInFlightBytes {
		return fmt.Errorf("%w: MaxInFlightBytes %d cannot hold one request with the longest key and value (%d bytes; MaxValueLen %d)",
			ErrInvalid, c.MaxInFlightBytes, need, c.MaxValueLen)
	}
	return nil
}

// Request and reply framing after the handshake:
//
//	request: op u8 | 0 0 0 | keyLen u32 | valLen u32 | waitMs u32 | key | value
//	reply:   status u8 | 0 0 0 | len u32 | body
//
// Set carries the value; Add carries the delta as 8 bytes big-endian and is
// answered with the new value the same way; Get carries how long the server
// may wait for the key (the server waits at most its own Timeout), and
// waitMs is 0 for the others. Status: 0 ok, 1 timed out (body: why, maybe
// empty), 2 error (body: message), 3 not a counter (body: message), 4 a
// limit refused the request (body: which). A client sends its next request
// only after the reply to the last: bytes arriving while a Get waits mean
// the client is gone or broken, and end the connection.
const (
	opSet = 1
	opGet = 2
	opAdd = 3

	stOK         = 0
	stTimeout    = 1
	stError      = 2
	stNotCounter = 3
	stLimit      = 4

	reqHeaderLen   = 16
	replyHeaderLen = 8
	maxErrorText   = 1024
)

// request is a decoded request header.
type request struct {
	op             byte
	keyLen, valLen int
	wait           time.Duration // Get only
}

// requestError is a request header the server refuses, and the reply that
// tells the client why.
type requestError struct {
	status byte
	msg    string
}

func (e *requestError) Error() string { return e.msg }

// decodeRequest checks a request header against the protocol and the
// server's longest value, before anything is allocated for the body.
func decodeRequest(h []byte, maxValue int) (request, error) {
	if len(h) < reqHeaderLen {
		return request{}, &requestError{stError, fmt.Sprintf("bad request: %d-byte header", len(h))}
	}
	r := request{op: h[0]}
	keyLen := binary.BigEndian.Uint32(h[4:])
	valLen := binary.BigEndian.Uint32(h[8:])
	waitMs := binary.BigEndian.Uint32(h[12:])
	bad := func(why string) (request, error) {
		return request{}, &requestError{stError, fmt.Sprintf("bad request (op %d, key %d bytes, value %d bytes): %s", r.op, keyLen, valLen, why)}
	}
	switch {
	case r.op < opSet || r.op > opAdd:
		return bad("unknown op")
	case h[1] != 0 || h[2] != 0 || h[3] != 0:
		return bad("reserved bytes set")
	case keyLen == 0 || keyLen > MaxKeyLen:
		return bad(fmt.Sprintf("keys are 1..%d bytes", MaxKeyLen))
	case r.op == opGet && valLen != 0:
		return bad("a get carries no value")
	case r.op == opAdd && valLen != 8:
		return bad("an add carries an 8-byte delta")
	case r.op != opGet && waitMs != 0:
		return bad("only a get waits")
	case uint64(valLen) > uint64(max(maxValue, 0)):
		return request{}, &requestError{stLimit, fmt.Sprintf("a value of %d bytes is longer than the store's limit of %d bytes (MaxValueLen)", valLen, maxValue)}
	}
	r.keyLen, r.valLen = int(keyLen), int(valLen)
	r.wait = time.Duration(waitMs) * time.Millisecond
	return r, nil
}

// encodeRequest writes a request header into h.
func encodeRequest(h []byte, r request) {
	h[0], h[1], h[2], h[3] = r.op, 0, 0, 0
	binary.BigEndian.PutUint32(h[4:], uint32(r.keyLen))
	binary.BigEndian.PutUint32(h[8:], uint32(r.valLen))
	ms := max(r.wait.Milliseconds(), 0)
	binary.BigEndian.PutUint32(h[12:], uint32(min(ms, math.MaxUint32)))
}

// StoreServer serves a MemStore to TCPStore clients.
type StoreServer struct {
	ln   net.Listener
	mem  *MemStore
	cfg  StoreConfig
	mode byte

	mu       sync.Mutex
	conns    map[*serverConn]struct{} // open, authenticated or not
	pending  list.List                // *serverConn still authenticating, oldest first
	byHost   map[string]int           // pending connections per remote host
	inFlight int64                    // request body bytes reserved
	turned   turnedAwayLog
	closed   bool
	wg       sync.WaitGroup
}

// serverConn is one of a server's connections.
type serverConn struct {
	net.Conn
	host    string        // remote host, for the turned-away log
	elem    *list.Element // in pending while authenticating
	evicted bool          // cut short by the accept loop to make room
	reset   bool          // to be closed with a reset (a stranger's)
}

// ListenStore starts a store server listening on addr ("host:port"; port 0
// picks a free one, see Addr).
func ListenStore(addr string, cfg StoreConfig) (*StoreServer, error) {
	cfg = cfg.withDefaults()
	mode, err := authMode(cfg.Secret, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkServerLimits(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: store server: %w", err)
	}
	return serveStore(ln, cfg, mode), nil
}

// ServeStore serves a store on an existing listener, which the server
// owns and closes.
func ServeStore(ln net.Listener, cfg StoreConfig) (*StoreServer, error) {
	cfg = cfg.withDefaults()
	mode, err := authMode(cfg.Secret, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkServerLimits(); err != nil {
		return nil, err
	}
	return serveStore(ln, cfg, mode), nil
}

// newStoreServer makes a server that does not accept connections yet; cfg
// has its defaults.
func newStoreServer(ln net.Listener, cfg StoreConfig, mode byte) *StoreServer {
	mem := NewMemStore()
	mem.MaxKeys, mem.MaxStoredBytes = cfg.MaxKeys, cfg.MaxStoredBytes
	return &StoreServer{ln: ln, mem: mem, cfg: cfg, mode: mode,
		conns: make(map[*serverConn]struct{}), byHost: make(map[string]int)}
}

func serveStore(ln net.Listener, cfg StoreConfig, mode byte) *StoreServer {
	s := newStoreServer(ln, cfg, mode)
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr is the address the server listens on.
func (s *StoreServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server: the listener and every connection are closed and
// waiting Gets fail. It waits for the server's goroutines.
func (s *StoreServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for sc := range s.conns {
		_ = sc.Close()
	}
	s.mu.Unlock()
	_ = s.mem.Close()
	s.wg.Wait()
	return err
}

// StoreStats is a snapshot of a StoreServer's load.
type StoreStats struct {
	Conns         int   // open connections, authenticated or not
	Pending       int   // of which still authenticating
	Keys          int   // keys stored
	StoredBytes   int64 // bytes stored, as MaxStoredBytes counts them
	InFlightBytes int64 // request bodies being read or served
}

// Stats reports the server's load.
func (s *StoreServer) Stats() StoreStats {
	keys, stored := s.mem.usage()
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{Conns: len(s.conns), Pending: s.pending.Len(), Keys: keys, StoredBytes: stored, InFlightBytes: s.inFlight}
}

// TurnedAway counts the connections a StoreServer closed without serving
// them, and where they came from: what a rank that timed out forming its
// job wants to know.
type TurnedAway struct {
	// Evicted: closed while authenticating, to make room for a newer
	// connection (MaxPending or MaxConns reached).
	Evicted int64
	// Refused: closed on arrival, every one of MaxConns connections being
	// authenticated.
	Refused int64
	// Abandoned: did not authenticate within HandshakeTimeout, or hung up
	// first.
	Abandoned int64
	// Rejected: failed authentication (a wrong secret, the other mode, not
	// this protocol).
	Rejected int64
	// From counts them by remote host, most first, for the first
	// MaxTurnedAwayHosts hosts seen.
	From []HostCount
	// FromOthers counts those from further hosts.
	FromOthers int64
}

// HostCount is how many connections came from one remote host.
type HostCount struct {
	Host  string
	Count int64
}

// MaxTurnedAwayHosts is how many remote hosts TurnedAway names.
const MaxTurnedAwayHosts = 16

// Total is how many connections were turned away.
func (t TurnedAway) Total() int64 { return t.Evicted + t.Refused + t.Abandoned + t.Rejected }

// String words the counts for an error message, e.g. "the store turned
// away 812 connections (800 evicted while authenticating, 12 abandoned
// authentication) from 10.0.0.9 (806), 10.0.0.3 (6)"; "" when none.
func (t TurnedAway) String() string {
	if t.Total() == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the store turned away %d connection", t.Total())
	if t.Total() != 1 {
		b.WriteByte('s')
	}
	sep := " ("
	for _, p := range []struct {
		n    int64
		what string
	}{{t.Evicted, "evicted while authenticating"}, {t.Refused, "refused at the connection limit"},
		{t.Abandoned, "abandoned authentication"}, {t.Rejected, "failed authentication"}} {
		if p.n > 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, p.n, p.what)
			sep = ", "
		}
	}
	b.WriteString(")")
	sep = " from "
	for _, h := range t.From {
		fmt.Fprintf(&b, "%s%s (%d)", sep, h.Host, h.Count)
		sep = ", "
	}
	if t.FromOthers > 0 {
		fmt.Fprintf(&b, "%s%d from other hosts", sep, t.FromOthers)
	}
	return b.String()
}

// TurnedAway reports the connections the server has turned away since it
// started.
func (s *StoreServer) TurnedAway() TurnedAway {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turned.report()
}

// turnedAwayLog keeps TurnedAway's counts.
type turnedAwayLog struct {
	counts TurnedAway // without From
	hosts  map[string]int64
}

type turnReason int

const (
	turnEvicted turnReason = iota
	turnRefused
	turnAbandoned
	turnRejected
)

func (l *turnedAwayLog) note(why turnReason, host string) {
	switch why {
	case turnEvicted:
		l.counts.Evicted++
	case turnRefused:
		l.counts.Refused++
	case turnAbandoned:
		l.counts.Abandoned++
	case turnRejected:
		l.counts.Rejected++
	}
	if l.hosts == nil {
		l.hosts = make(map[string]int64)
	}
	if _, ok := l.hosts[host]; ok || len(l.hosts) < MaxTurnedAwayHosts {
		l.hosts[host]++
	} else {
		l.counts.FromOthers++
	}
}

func (l *turnedAwayLog) report() TurnedAway {
	t := l.counts
	t.From = make([]HostCount, 0, len(l.hosts))
	for h, n := range l.hosts {
		t.From = append(t.From, HostCount{h, n})
	}
	slices.SortFunc(t.From, func(a, b HostCount) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Host, b.Host)
	})
	return t
}

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
			if s.evictLocked() == nil {
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

// evictLocked evicts the oldest pending connection of the host with the
// most pending connections: it no longer counts against the limits, and
// its handshake is cut short (its goroutine closes it). It returns the
// connection, or nil when nothing is pending. Called with mu held.
//
// The handshake is interrupted rather than the connection closed: one
// whose handshake has already succeeded (the client holds the server's
// final message) is admitted after all, so a client never finds the
// connection it authenticated closed under it.
func (s *StoreServer) evictLocked() *serverConn {
	most := 0
	for _, n := range s.byHost {
		most = max(most, n)
	}
	for e := s.pending.Front(); e != nil; e = e.Next() {
		sc := e.Value.(*serverConn)
		if s.byHost[sc.host] == most {
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
	err := serverHandshake(sc.Conn, s.cfg.Secret, s.mode)
	if s.admit(sc, err) {
		s.serveRequests(sc.Conn)
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

// serveRequests answers an authenticated client's requests until it goes
// away or breaks the protocol.
func (s *StoreServer) serveRequests(c net.Conn) {
	var hdr [reqHeaderLen]byte
	for {
		// An authenticated client may stay idle between calls; once a
		// request begins, the rest of it must follow in time.
		_ = c.SetDeadline(time.Time{})
		if _, err := io.ReadFull(c, hdr[:1]); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
		if _, err := io.ReadFull(c, hdr[1:]); err != nil {
			return
		}
		req, err := decodeRequest(hdr[:], s.cfg.MaxValueLen)
		if err != nil {
			var re *requestError
			if errors.As(err, &re) {
				s.replyText(c, re.status, re.msg)
			}
			return
		}
		if !s.handle(c, req) {
			return
		}
	}
}

// reserve takes n bytes of the in-flight budget, or reports how much is
// taken.
func (s *StoreServer) reserve(n int64) (ok bool, taken int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight+n > s.cfg.MaxInFlightBytes {
		return false, s.inFlight
	}
	s.inFlight += n
	return true, 0
}

func (s *StoreServer) release(n int64) {
	s.mu.Lock()
	s.inFlight -= n
	s.mu.Unlock()
}

// handle reads the body of one request, serves it and replies; false ends
// the connection.
func (s *StoreServer) handle(c net.Conn, req request) bool {
	n := int64(req.keyLen) + int64(req.valLen)
	if ok, taken := s.reserve(n); !ok {
		s.replyText(c, stLimit, fmt.Sprintf("a request of %d bytes would pass the store's limit of %d bytes of requests in flight (MaxInFlightBytes; %d in flight): try again later",
			n, s.cfg.MaxInFlightBytes, taken))
		return false
	}
	// Both buffers are within the reservation; the value's becomes the
	// stored value, uncopied. The reservation ends once the body is in,
	// before the request is served and answered: a client that has its
	// answer must find the budget free again (its next request, or
	// another client's, would otherwise be refused while this goroutine
	// has yet to run its release), and what the body became is counted as
	// stored bytes (Set) or is a key of at most MaxKeyLen (Get, Add).
	keyb := make([]byte, req.keyLen)
	val := make([]byte, req.valLen)
	_, kerr := io.ReadFull(c, keyb)
	var verr error
	if kerr == nil {
		_, verr = io.ReadFull(c, val)
	}
	s.release(n)
	if kerr != nil || verr != nil {
		return false
	}
	key := string(keyb)
	switch req.op {
	case opSet:
		if err := s.mem.set(key, val); err != nil {
			return s.replyStoreErr(c, err)
		}
		return s.reply(c, stOK, nil)
	case opAdd:
		v, err := s.mem.Add(context.Background(), key, int64(binary.BigEndian.Uint64(val)))
		if err != nil {
			return s.replyStoreErr(c, err)
		}
		return s.reply(c, stOK, binary.BigEndian.AppendUint64(nil, uint64(v)))
	}
	// opGet. Look once, then wait while watching the client.
	v, err := s.mem.wait(context.Background(), key, 0, true)
	if errors.Is(err, ErrTimeout) {
		wait := min(req.wait, s.cfg.Timeout)
		if wait > 0 {
			var gone bool
			if v, err, gone = s.waitWatching(c, key, wait); gone {
				return false
			}
		}
		if errors.Is(err, ErrTimeout) {
			return s.replyText(c, stTimeout, s.timeoutNote(key, req.wait))
		}
	}
	if err != nil {
		return false // closed
	}
	return s.reply(c, stOK, v)
}

// waitWatching waits up to wait for key, and reports gone without waiting
// further when the client hangs up (or sends anything: it may not while
// its Get waits), so that no socket lingers in CLOSE-WAIT.
func (s *StoreServer) waitWatching(c net.Conn, key string, wait time.Duration) (v []byte, err error, gone bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = c.SetReadDeadline(time.Time{})
	watch := make(chan bool, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		g := err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
		if g {
			cancel()
		}
		watch <- g
	}()
	v, err = s.mem.wait(ctx, key, wait, true)
	_ = c.SetReadDeadline(time.Unix(1, 0)) // stop the watcher
	if <-watch {
		return nil, nil, true
	}
	return v, err, false
}

// timeoutNote explains a Get's timeout to its client, with what the
// server turned away: the likely reason a rank never set its key.
func (s *StoreServer) timeoutNote(key string, asked time.Duration) string {
	wait := min(asked, s.cfg.Timeout)
	note := fmt.Sprintf("key %q not set within %v", key, wait)
	if asked > wait {
		note += fmt.Sprintf(" (the store's longest wait, its Timeout; %v asked)", asked)
	}
	if t := s.TurnedAway().String(); t != "" {
		note += "; " + t
	}
	return note
}

// replyStoreErr answers a failed Set or Add; false ends the connection.
func (s *StoreServer) replyStoreErr(c net.Conn, err error) bool {
	var le *limitError
	switch {
	case errors.As(err, &le):
		return s.replyText(c, stLimit, le.detail)
	case errors.Is(err, ErrNotCounter):
		return s.replyText(c, stNotCounter, err.Error())
	}
	return false // closed
}

// replyText replies with a message, cut to what a client reads.
func (s *StoreServer) replyText(c net.Conn, status byte, msg string) bool {
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText]
	}
	return s.reply(c, status, []byte(msg))
}

// reply writes a reply; body is not copied (it may be a stored value).
func (s *StoreServer) reply(c net.Conn, status byte, body []byte) bool {
	var h [replyHeaderLen]byte
	h[0] = status
	binary.BigEndian.PutUint32(h[4:], uint32(len(body)))
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
	bufs := net.Buffers{h[:], body}
	_, err := bufs.WriteTo(c)
	return err == nil
}

// TCPStore is a client of a StoreServer. It is safe for concurrent use:
// each call in flight uses its own connection (kept for reuse afterwards),
// so a blocked Get never delays a Set.
type TCPStore struct {
	addr string
	cfg  StoreConfig
	mode byte

	mu     sync.Mutex
	idle   []net.Conn
	busy   map[net.Conn]struct{}
	closed bool
	server *StoreServer // hosted by this rank (Connect on rank 0), closed with the client
}

var _ Store = (*TCPStore)(nil)

// maxIdle is how many connections a client keeps for reuse.
const maxIdle = 4

// maxHandshakeRetryWait is the longest a client waits before trying again
// after a server cut its handshake short.
const maxHandshakeRetryWait = 50 * time.Millisecond

// DialStore connects to the store server at addr, retrying while the
// server is not up yet, until ctx ends or cfg.Timeout passes. A server that
// refuses our secret or fails to prove its own is an error at once.
func DialStore(ctx context.Context, addr string, cfg StoreConfig) (*TCPStore, error) {
	cfg = cfg.withDefaults()
	mode, err := authMode(cfg.Secret, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	s := &TCPStore{addr: addr, cfg: cfg, mode: mode, busy: make(map[net.Conn]struct{})}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.put(c, true)
	return s, nil
}

// Addr is the server's address.
func (s *TCPStore) Addr() string { return s.addr }

// Server is the StoreServer this client hosts (rank 0's, after Connect),
// or nil: ask it what it turned away (StoreServer.TurnedAway) when the job
// fails to form.
func (s *TCPStore) Server() *StoreServer { return s.server }

// Close closes the client's connections, failing calls in flight, and the
// server if this client hosts it.
func (s *TCPStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, c := range s.idle {
		_ = c.Close()
	}
	s.idle = nil
	for c := range s.busy {
		_ = c.Close()
	}
	srv := s.server
	s.mu.Unlock()
	if srv != nil {
		return srv.Close()
	}
	return nil
}

// callCtx bounds ctx by the client's timeout.
func (s *TCPStore) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// dial opens and authenticates a connection, retrying connection failures.
// A server that is up but cut the handshake short (it was flooded with
// connections, and evicted ours) is retried sooner than one that is not up.
func (s *TCPStore) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var last error
	for {
		wait := backoff
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			wait = min(backoff, maxHandshakeRetryWait)
			dl, _ := ctx.Deadline()
			_ = c.SetDeadline(earliest(dl, time.Now().Add(s.cfg.HandshakeTimeout)))
			err = clientHandshake(c, s.cfg.Secret, s.mode)
			if err == nil {
				_ = c.SetDeadline(time.Time{})
				return c, nil
			}
			_ = c.Close()
			if isAuthErr(err) {
				return nil, fmt.Errorf("rendezvous: store %s: %w", s.addr, err)
			}
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, s.ctxErr(ctx, fmt.Sprintf("connecting to store %s (last error: %v)", s.addr, last))
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// ctxErr words the end of ctx: a timeout of ours wraps ErrTimeout.
func (s *TCPStore) ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("rendezvous: %s: %w (%w)", what, ErrTimeout, ctx.Err())
	}
	return fmt.Errorf("rendezvous: %s: %w", what, ctx.Err())
}

func (s *TCPStore) get(ctx context.Context) (net.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.busy[c] = struct{}{}
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	s.busy[c] = struct{}{}
	return c, nil
}

// put returns a connection after a call; a broken one is closed.
func (s *TCPStore) put(c net.Conn, healthy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, c)
	if healthy && !s.closed && len(s.idle) < maxIdle {
		s.idle = append(s.idle, c)
		return
	}
	_ = c.Close()
}

// roundTrip sends one request and reads its reply.
func (s *TCPStore) roundTrip(ctx context.Context, what string, op byte, key string, val []byte) (byte, []byte, error) {
	if err := checkKey(key); err != nil {
		return 0, nil, err
	}
	if len(val) > s.cfg.MaxValueLen {
		return 0, nil, fmt.Errorf("%w: a value of %d bytes is longer than the limit of %d bytes (MaxValueLen)", ErrLimit, len(val), s.cfg.MaxValueLen)
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	c, err := s.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	deadline, _ := ctx.Deadline()
	var wait time.Duration
	ioDeadline := deadline
	if op == opGet {
		// The server answers "timed out" when the wait ends; give that
		// answer a moment to arrive before the connection deadline.
		wait = time.Until(deadline)
		ioDeadline = deadline.Add(2 * time.Second)
	}
	_ = c.SetDeadline(ioDeadline)
	// A cancelled (not expired) context unblocks the connection at once.
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || op != opGet {
			_ = c.SetDeadline(time.Unix(1, 0))
		}
	})
	status, body, err := s.exchange(c, op, key, val, wait)
	stop()
	if err != nil {
		s.put(c, false)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return 0, nil, ErrClosed
		case ctx.Err() != nil && (op != opGet || !errors.Is(ctx.Err(), context.DeadlineExceeded)):
			return 0, nil, s.ctxErr(ctx, what)
		case errors.Is(err, ErrProtocol):
			return 0, nil, fmt.Errorf("rendezvous: %s: %w", what, err)
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return 0, nil, fmt.Errorf("rendezvous: %s: store server %s closed the connection: %w", what, s.addr, err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, nil, fmt.Errorf("rendezvous: %s: %w: no answer from store %s", what, ErrTimeout, s.addr)
		}
		return 0, nil, fmt.Errorf("rendezvous: %s: %w", what, err)
	}
	// After a refusal the server may have closed the connection.
	s.put(c, status != stError && status != stLimit)
	return status, body, nil
}

func (s *TCPStore) exchange(c net.Conn, op byte, key string, val []byte, wait time.Duration) (byte, []byte, error) {
	req := make([]byte, reqHeaderLen+len(key)+len(val))
	encodeRequest(req, request{op: op, keyLen: len(key), valLen: len(val), wait: wait})
	copy(req[reqHeaderLen:], key)
	copy(req[reqHeaderLen+len(key):], val)
	if _, err := c.Write(req); err != nil {
		return 0, nil, err
	}
	var hdr [replyHeaderLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	status := hdr[0]
	limit := uint64(s.cfg.MaxValueLen)
	if status != stOK {
		limit = maxErrorText
	}
	if status > stLimit || uint64(n) > limit {
		return 0, nil, fmt.Errorf("%w: reply status %d with %d bytes", ErrProtocol, status, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, nil, err
	}
	return status, body, nil
}

// Set stores value under key.
func (s *TCPStore) Set(ctx context.Context, key string, value []byte) error {
	what := fmt.Sprintf("set %q", key)
	status, body, err := s.roundTrip(ctx, what, opSet, key, value)
	if err != nil {
		return err
	}
	return statusErr(what, status, body)
}

// Get waits for key and returns its value.
func (s *TCPStore) Get(ctx context.Context, key string) ([]byte, error) {
	what := fmt.Sprintf("get %q", key)
	status, body, err := s.roundTrip(ctx, what, opGet, key, nil)
	if err != nil {
		return nil, err
	}
	if err := statusErr(what, status, body); err != nil {
		return nil, err
	}
	return body, nil
}

// Add adds delta to the counter at key and returns the new value.
func (s *TCPStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	what := fmt.Sprintf("add to %q", key)
	status, body, err := s.roundTrip(ctx, what, opAdd, key, binary.BigEndian.AppendUint64(nil, uint64(delta)))
	if err != nil {
		return 0, err
	}
	if err := statusErr(what, status, body); err != nil {
		return 0, err
	}
	if len(body) != 8 {
		return 0, fmt.Errorf("rendezvous: %s: %w: %d-byte counter", what, ErrProtocol, len(body))
	}
	return int64(binary.BigEndian.Uint64(body)), nil
}

func statusErr(what string, status byte, body []byte) error {
	switch status {
	case stOK:
		return nil
	case stTimeout:
		if len(body) == 0 {
			return fmt.Errorf("rendezvous: %s: %w: key not set in time", what, ErrTimeout)
		}
		return fmt.Errorf("rendezvous: %s: %w: store server: %s", what, ErrTimeout, untrusted.Printable(body))
	case stNotCounter:
		return fmt.Errorf("rendezvous: %s: %w", what, ErrNotCounter)
	case stLimit:
		return fmt.Errorf("rendezvous: %s: %w: store server: %s", what, ErrLimit, untrusted.Printable(body))
	}
	return fmt.Errorf("rendezvous: %s: store server: %s", what, untrusted.Printable(body))
}
