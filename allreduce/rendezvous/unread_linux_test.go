package rendezvous

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// outq is the bytes in c's socket send queue that the peer has not
// acknowledged (SIOCOUTQ), or -1.
func outq(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return -1
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
	return n
}

// serverSide is the server's end of the client connection c, once the
// server has admitted it.
func serverSide(t *testing.T, srv *StoreServer, c net.Conn) net.Conn {
	t.Helper()
	var found net.Conn
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for sc := range srv.conns {
			if sc.RemoteAddr().String() == c.LocalAddr().String() {
				found = sc.Conn
			}
		}
		return found != nil
	})
	return found
}

// TestStoreUnreadRepliesBounded: the review's attack. A client sends 200
// Gets of a 1 MiB value and reads nothing. The server holds at most
// MaxUnreadReplyBytes of replies in the connection's send buffer (the
// kernel counts twice the setting), stops reading its requests, and
// closes it after IOTimeout; meanwhile other clients are served.
func TestStoreUnreadRepliesBounded(t *testing.T) {
	ctx := context.Background()
	cfg := testStoreConfig()
	cfg.IOTimeout = 700 * time.Millisecond
	srv := startServer(t, cfg)
	addr := srv.Addr().String()
	cl, err := DialStore(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	big := make([]byte, DefaultMaxValueLen)
	if err := cl.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	c := rawClient(t, addr)
	defer c.Close()
	tc := c.Conn.(*net.TCPConn)
	tc.SetReadBuffer(64 << 10) // the attacker's side holds little
	go func() {
		for i := 0; i < 200; i++ {
			if _, err := c.Write(rawRequest(opGet, "big", nil, 0)); err != nil {
				return
			}
		}
	}()
	sc := serverSide(t, srv, c)
	peak := 0
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond {
		peak = max(peak, outq(sc))
		// Others are served meanwhile.
		if v, err := cl.Get(ctx, "big"); err != nil || len(v) != len(big) {
			t.Fatalf("another client's Get: %d bytes, %v", len(v), err)
		}
	}
	limit := 2*DefaultMaxUnreadReplyBytes + 64<<10
	t.Logf("200 unread 1 MiB Gets: at most %d bytes queued in the server's send buffer (limit %d)", peak, limit)
	if peak > limit {
		t.Errorf("%d bytes of replies queued, want at most %d", peak, limit)
	}
	// The connection is closed after IOTimeout without a reply taken,
	// and the client sees it.
	waitFor(t, func() bool { return srv.Stats().Conns == 1 })
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("closed after %v, IOTimeout %v", el, cfg.IOTimeout)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var err2 error
	for err2 == nil {
		_, _, err2 = readReply(c)
	}
	if ne, ok := err2.(net.Error); ok && ne.Timeout() {
		t.Errorf("the client did not see the connection end: %v", err2)
	}
	t.Logf("closed after %v; the client reads: %v", time.Since(start).Round(time.Millisecond), err2)
}
