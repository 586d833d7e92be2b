package rendezvous

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// StoreConfig configures a StoreServer and its TCPStore clients.
type StoreConfig struct {
	// Secret authenticates every connection (both directions). Required
	// unless Insecure.
	Secret []byte
	// Insecure runs without authentication: an explicit opt-out, for
	// tests and trusted single-user machines. Both ends must agree.
	Insecure bool
	// Timeout bounds every client call (a Get waits at most this long for
	// its key) when the caller's context has no earlier deadline, and the
	// server's reads of a request. Default DefaultTimeout.
	Timeout time.Duration
	// MaxValueLen is the longest value accepted (server) or read (client).
	// Default DefaultMaxValueLen.
	MaxValueLen int
	// MaxConns bounds the server's open connections, authenticated or not;
	// more are closed at once. Default 1024.
	MaxConns int
}

func (c StoreConfig) withDefaults() StoreConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxValueLen <= 0 {
		c.MaxValueLen = DefaultMaxValueLen
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	return c
}

// Request and reply framing after the handshake:
//
//	request: op u8 | 0 0 0 | keyLen u32 | valLen u32 | waitMs u32 | key | value
//	reply:   status u8 | 0 0 0 | len u32 | body
//
// Set carries the value; Add carries the delta as 8 bytes big-endian and is
// answered with the new value the same way; Get carries how long the server
// may wait for the key. Status: 0 ok, 1 timed out, 2 error (body: message),
// 3 not a counter (body: message).
const (
	opSet = 1
	opGet = 2
	opAdd = 3

	stOK         = 0
	stTimeout    = 1
	stError      = 2
	stNotCounter = 3

	reqHeaderLen   = 16
	replyHeaderLen = 8
	maxErrorText   = 1024
)

// StoreServer serves a MemStore to TCPStore clients.
type StoreServer struct {
	ln   net.Listener
	mem  *MemStore
	cfg  StoreConfig
	mode byte

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// ListenStore starts a store server listening on addr ("host:port"; port 0
// picks a free one, see Addr).
func ListenStore(addr string, cfg StoreConfig) (*StoreServer, error) {
	cfg = cfg.withDefaults()
	mode, err := authMode(cfg.Secret, cfg.Insecure)
	if err != nil {
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
	return serveStore(ln, cfg, mode), nil
}

func serveStore(ln net.Listener, cfg StoreConfig, mode byte) *StoreServer {
	s := &StoreServer{ln: ln, mem: NewMemStore(), cfg: cfg, mode: mode, conns: make(map[net.Conn]struct{})}
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
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.mem.Close()
	s.wg.Wait()
	return err
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
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.cfg.MaxConns {
			s.mu.Unlock()
			_ = c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *StoreServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(min(HandshakeTimeout, s.cfg.Timeout)))
	if err := serverHandshake(c, s.cfg.Secret, s.mode); err != nil {
		return
	}
	var hdr [reqHeaderLen]byte
	for {
		// An authenticated client may stay idle between calls.
		_ = c.SetDeadline(time.Time{})
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(s.cfg.Timeout))
		op := hdr[0]
		keyLen := binary.BigEndian.Uint32(hdr[4:])
		valLen := binary.BigEndian.Uint32(hdr[8:])
		wait := time.Duration(binary.BigEndian.Uint32(hdr[12:])) * time.Millisecond
		if op < opSet || op > opAdd || keyLen == 0 || keyLen > MaxKeyLen || uint64(valLen) > uint64(s.cfg.MaxValueLen) ||
			(op == opAdd && valLen != 8) || (op == opGet && valLen != 0) {
			s.reply(c, stError, []byte(fmt.Sprintf("bad request: op %d, key %d bytes, value %d bytes (max %d)", op, keyLen, valLen, s.cfg.MaxValueLen)))
			return
		}
		body := make([]byte, int(keyLen)+int(valLen))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		key, val := string(body[:keyLen]), body[keyLen:]
		var status byte
		var out []byte
		switch op {
		case opSet:
			if err := s.mem.Set(context.Background(), key, val); err != nil {
				return
			}
		case opGet:
			v, err := s.mem.wait(context.Background(), key, wait)
			switch {
			case err == nil:
				out = v
			case errors.Is(err, ErrTimeout):
				status = stTimeout
			default:
				return
			}
		case opAdd:
			n, err := s.mem.Add(context.Background(), key, int64(binary.BigEndian.Uint64(val)))
			switch {
			case err == nil:
				out = binary.BigEndian.AppendUint64(nil, uint64(n))
			case errors.Is(err, ErrNotCounter):
				status, out = stNotCounter, []byte(err.Error())
			default:
				return
			}
		}
		_ = c.SetDeadline(time.Now().Add(s.cfg.Timeout))
		if !s.reply(c, status, out) {
			return
		}
	}
}

func (s *StoreServer) reply(c net.Conn, status byte, body []byte) bool {
	b := make([]byte, replyHeaderLen+len(body))
	b[0] = status
	binary.BigEndian.PutUint32(b[4:], uint32(len(body)))
	copy(b[replyHeaderLen:], body)
	_, err := c.Write(b)
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
func (s *TCPStore) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var last error
	for {
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			dl, _ := ctx.Deadline()
			_ = c.SetDeadline(earliest(dl, time.Now().Add(HandshakeTimeout)))
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
		t := time.NewTimer(backoff)
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
		return 0, nil, fmt.Errorf("%w: value of %d bytes (max %d)", ErrInvalid, len(val), s.cfg.MaxValueLen)
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
	s.put(c, true)
	return status, body, nil
}

func (s *TCPStore) exchange(c net.Conn, op byte, key string, val []byte, wait time.Duration) (byte, []byte, error) {
	req := make([]byte, reqHeaderLen+len(key)+len(val))
	req[0] = op
	binary.BigEndian.PutUint32(req[4:], uint32(len(key)))
	binary.BigEndian.PutUint32(req[8:], uint32(len(val)))
	ms := max(wait.Milliseconds(), 0)
	binary.BigEndian.PutUint32(req[12:], uint32(min(ms, int64(^uint32(0)))))
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
	if status > stNotCounter || uint64(n) > limit {
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
		return fmt.Errorf("rendezvous: %s: %w: key not set in time", what, ErrTimeout)
	case stNotCounter:
		return fmt.Errorf("rendezvous: %s: %w", what, ErrNotCounter)
	}
	return fmt.Errorf("rendezvous: %s: store server: %s", what, untrusted.Printable(body))
}
