package rendezvous

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

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
	cfg, mode, err := cfg.forServer()
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
	cfg, mode, err := cfg.forServer()
	if err != nil {
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

// serveRequests answers an authenticated client's requests until it goes
// away or breaks the protocol. It reads a request only once the reply to
// the last has been handed to the kernel in whole: a client that sends
// requests without reading the replies finds the connection's send buffer
// (MaxUnreadReplyBytes) full, the server no longer reading, and after
// IOTimeout the connection closed.
func (s *StoreServer) serveRequests(l *storeLink) {
	var hdr [reqHeaderLen]byte
	for {
		// An authenticated client may stay idle between calls; once a
		// request begins, the rest of it must follow in time.
		_ = l.SetDeadline(time.Time{})
		if _, err := io.ReadFull(l, hdr[:1]); err != nil {
			return
		}
		_ = l.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
		if err := l.readRecord(hdr[:], 1); err != nil {
			s.readFailed(l, err)
			return
		}
		req, err := decodeRequest(hdr[:], s.cfg.MaxValueLen)
		if err != nil {
			var re *requestError
			if errors.As(err, &re) {
				s.replyText(l, re.status, re.msg)
			}
			return
		}
		if !s.handle(l, req) {
			return
		}
	}
}

// readFailed ends a connection whose request could not be read: one that
// failed its authentication is counted as turned away (tampered) and its
// client told which record failed, in a reply the client can check.
func (s *StoreServer) readFailed(l *storeLink, err error) {
	if !errors.Is(err, ErrFrameAuth) {
		return
	}
	s.mu.Lock()
	s.turned.note(turnTampered, hostOf(l.RemoteAddr()))
	s.mu.Unlock()
	s.replyText(l, stError, fmt.Sprintf("request from %s: %v: %s", l.RemoteAddr(), err, tamperNote))
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
func (s *StoreServer) handle(c *storeLink, req request) bool {
	n := int64(req.keyLen) + int64(req.valLen)
	if ok, taken := s.reserve(n); !ok {
		s.replyText(c, stLimit, fmt.Sprintf("a request of %d bytes would pass the store's limit of %d bytes of requests in flight (MaxInFlightBytes; %d in flight): try again later",
			n, s.cfg.MaxInFlightBytes, taken))
		return false
	}
	// The body is within the reservation; its value becomes the stored
	// value, uncopied. The reservation ends once the body is in,
	// before the request is served and answered: a client that has its
	// answer must find the budget free again (its next request, or
	// another client's, would otherwise be refused while this goroutine
	// has yet to run its release), and what the body became is counted as
	// stored bytes (Set) or is a key of at most MaxKeyLen (Get, Add).
	body := make([]byte, n)
	err := c.readRecord(body, 0)
	s.release(n)
	if err != nil {
		s.readFailed(c, err)
		return false
	}
	key, val := string(body[:req.keyLen]), body[req.keyLen:n:n]
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
func (s *StoreServer) waitWatching(c *storeLink, key string, wait time.Duration) (v []byte, err error, gone bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = c.SetReadDeadline(time.Time{})
	watch := make(chan bool, 1)
	go func() {
		var b [1]byte
		_, err := c.Conn.Read(b[:])
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
func (s *StoreServer) replyStoreErr(c *storeLink, err error) bool {
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
func (s *StoreServer) replyText(c *storeLink, status byte, msg string) bool {
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText]
	}
	return s.reply(c, status, []byte(msg))
}

// reply writes a reply; body is not copied (it may be a stored value).
func (s *StoreServer) reply(c *storeLink, status byte, body []byte) bool {
	var h [replyHeaderLen]byte
	encodeReply(h[:], status, len(body))
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
	return c.writeFrame(h[:], body) == nil
}
