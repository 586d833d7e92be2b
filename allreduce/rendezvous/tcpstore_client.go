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

// TCPStore is a client of a StoreServer. It is safe for concurrent use:
// each call in flight uses its own connection (kept for reuse afterwards),
// so a blocked Get never delays a Set.
type TCPStore struct {
	addr string
	cfg  StoreConfig
	mode byte

	mu     sync.Mutex
	idle   []*storeLink
	busy   map[*storeLink]struct{}
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
	s := &TCPStore{addr: addr, cfg: cfg, mode: mode, busy: make(map[*storeLink]struct{})}
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
func (s *TCPStore) dial(ctx context.Context) (*storeLink, error) {
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
			var key *[32]byte
			key, err = clientHandshake(c, s.cfg.Secret, s.mode)
			if err == nil {
				_ = c.SetDeadline(time.Time{})
				var l *storeLink
				if l, err = newStoreLink(c, key, true); err == nil {
					return l, nil
				}
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

func (s *TCPStore) get(ctx context.Context) (*storeLink, error) {
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
func (s *TCPStore) put(c *storeLink, healthy bool) {
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
	// A cancellation racing the reply may have set the past deadline
	// after all: such a connection would fail the next call at once, so it
	// goes rather than back to the pool.
	unblocked := !stop()
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
		case errors.Is(err, ErrFrameAuth):
			return 0, nil, fmt.Errorf("rendezvous: %s: store %s: reply: %w: %s", what, s.addr, err, tamperNote)
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
	s.put(c, status != stError && status != stLimit && !unblocked)
	return status, body, nil
}

// exchange sends one request and reads its reply: header first, checked
// (and authenticated) before anything is allocated for the body.
func (s *TCPStore) exchange(c *storeLink, op byte, key string, val []byte, wait time.Duration) (byte, []byte, error) {
	req := make([]byte, reqHeaderLen+len(key)+len(val))
	encodeRequest(req, request{op: op, keyLen: len(key), valLen: len(val), wait: wait})
	copy(req[reqHeaderLen:], key)
	copy(req[reqHeaderLen+len(key):], val)
	if err := c.writeFrame(req[:reqHeaderLen], req[reqHeaderLen:]); err != nil {
		return 0, nil, err
	}
	var hdr [replyHeaderLen]byte
	if err := c.readRecord(hdr[:], 0); err != nil {
		return 0, nil, err
	}
	status, n, err := decodeReply(hdr[:], s.cfg.MaxValueLen)
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	if err := c.readRecord(body, 0); err != nil {
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
