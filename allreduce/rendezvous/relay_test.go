package rendezvous

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// relay is an on-path attacker without the secret: it forwards every
// connection to the store, passes the handshake through, and hands each
// frame after it, whole (header, body and tags as they travel), to
// requests or replies, which return what to forward instead.
type relay struct {
	ln       net.Listener
	target   string
	sealed   bool
	requests editFunc
	replies  editFunc

	mu    sync.Mutex
	conns int
	wg    sync.WaitGroup
}

// editFunc is what a relay does to frame i of connection conn.
type editFunc func(conn, i int, frame []byte) []byte

// startRelay listens on loopback and relays to the store at target,
// passing requests and replies through their edits (nil: as they are).
func startRelay(t *testing.T, target string, sealed bool, requests, replies editFunc) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, sealed: sealed, requests: requests, replies: replies}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		n := r.conns
		r.conns++
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(n, c, s, answerLen, reqHeaderLen, func(h []byte) int {
			return int(binary.BigEndian.Uint32(h[4:]) + binary.BigEndian.Uint32(h[8:]))
		}, r.requests)
		go r.pipe(n, s, c, helloLen+1+macLen, replyHeaderLen, func(h []byte) int {
			return int(binary.BigEndian.Uint32(h[4:]))
		}, r.replies)
	}
}

// pipe forwards from src to dst: hs bytes of handshake, then frames of a
// hdrLen-byte header announcing bodyLen bytes, each passed through edit.
func (r *relay) pipe(conn int, src, dst net.Conn, hs, hdrLen int, bodyLen func([]byte) int, edit editFunc) {
	defer r.wg.Done()
	defer dst.Close()
	defer src.Close()
	if _, err := io.CopyN(dst, src, int64(hs)); err != nil {
		return
	}
	tag := 0
	if r.sealed {
		tag = 16
	}
	for i := 0; ; i++ {
		f := make([]byte, hdrLen+tag)
		if _, err := io.ReadFull(src, f); err != nil {
			return
		}
		body := make([]byte, bodyLen(f)+tag)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		f = append(f, body...)
		if edit != nil {
			f = edit(conn, i, f)
		}
		if _, err := dst.Write(f); err != nil {
			return
		}
	}
}

// replace is f with old replaced by new (of the same length).
func replace(f []byte, old, new string) []byte {
	return bytes.ReplaceAll(f, []byte(old), []byte(new))
}

// TestStoreRelayRewritesReply: the review's attack. A relay rewrites the
// elastic plan and a rank's address in the server's replies; the reading
// side gets an error wrapping ErrFrameAuth, never the rewritten value. The
// same relay on an insecure store changes the value unseen: that is what
// insecure means.
func TestStoreRelayRewritesReply(t *testing.T) {
	ctx := context.Background()
	plan := `{"attempt":1,"ranks_per_node":1,"members":[0,1]}`
	for _, c := range []struct {
		key, value, old, new string
	}{
		{"elastic/1/plan", plan, `"ranks_per_node":1`, `"ranks_per_node":9`},
		{"rank/3/addr", "10.0.0.3:29400", "10.0.0.3", "10.6.6.6"},
	} {
		cfg := testStoreConfig()
		srv := startServer(t, cfg)
		r := startRelay(t, srv.Addr().String(), true, nil, func(_, _ int, f []byte) []byte { return replace(f, c.old, c.new) })
		cl, err := DialStore(ctx, r.addr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.Set(ctx, c.key, []byte(c.value)); err != nil {
			t.Fatal(err)
		}
		v, err := cl.Get(ctx, c.key)
		if !errors.Is(err, ErrFrameAuth) || !strings.Contains(err.Error(), "frame authentication failed") || !strings.Contains(err.Error(), r.addr()) {
			t.Fatalf("%s rewritten in transit: Get = %q, %v; want a frame authentication error naming the store", c.key, v, err)
		}
		if v != nil {
			t.Fatalf("%s: the rewritten value %q came through", c.key, v)
		}
		t.Logf("%s rewritten in transit: %v", c.key, err)
	}

	srv := startServer(t, StoreConfig{Insecure: true})
	r := startRelay(t, srv.Addr().String(), false, nil, func(_, _ int, f []byte) []byte { return replace(f, "10.0.0.3", "10.6.6.6") })
	cl, err := DialStore(ctx, r.addr(), StoreConfig{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Set(ctx, "addr", []byte("10.0.0.3:1"))
	if v, err := cl.Get(ctx, "addr"); err != nil || string(v) != "10.6.6.6:1" {
		t.Fatalf("insecure store through the relay: %q, %v (the relay's rewrite expected)", v, err)
	}
}

// TestStoreRelayRewritesRequest: a relay that rewrites a Set's value on
// its way to the server makes the server refuse it, tell the client which
// record failed, close the connection and count it; the value is not
// stored.
func TestStoreRelayRewritesRequest(t *testing.T) {
	ctx := context.Background()
	cfg := testStoreConfig()
	srv := startServer(t, cfg)
	r := startRelay(t, srv.Addr().String(), true, func(_, _ int, f []byte) []byte { return replace(f, "10.0.0.3", "10.6.6.6") }, nil)
	cl, err := DialStore(ctx, r.addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.Set(ctx, "rank/3/addr", []byte("10.0.0.3:29400"))
	if err == nil || !strings.Contains(err.Error(), "frame authentication failed on record 1") {
		t.Fatalf("Set rewritten in transit: %v; want the server's frame authentication error", err)
	}
	t.Logf("Set rewritten in transit: %v", err)
	waitFor(t, func() bool { return srv.TurnedAway().Tampered == 1 })
	if s := srv.TurnedAway().String(); !strings.Contains(s, "1 closed after a frame failed authentication") || !strings.Contains(s, "127.0.0.1") {
		t.Errorf("turned away: %s", s)
	}
	direct, err := DialStore(ctx, srv.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if v, err := direct.Get(short, "rank/3/addr"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the rewritten value was stored: %q, %v", v, err)
	}
}

// TestStoreRelayReplaysReply: an earlier reply replayed in place of a
// later one (the old value of a key after it changed), or a reply taken
// from another connection at the same position, is refused; so is a
// reply dropped and another put in its place. (A relay can always drop
// everything: then the call times out.)
func TestStoreRelayReplaysReply(t *testing.T) {
	ctx := context.Background()
	cfg := testStoreConfig()
	for _, c := range []struct {
		name  string
		edit  func(seen map[[2]int][]byte, conn, i int, f []byte) []byte
		conns int
	}{
		// Replies on connection 0: 0 Set, 1 Get (v1), 2 Set, 3 Get (v2).
		{"replayed", func(seen map[[2]int][]byte, conn, i int, f []byte) []byte {
			if i == 3 {
				return seen[[2]int{conn, 1}]
			}
			return f
		}, 1},
		{"from another connection", func(seen map[[2]int][]byte, conn, i int, f []byte) []byte {
			if conn == 1 && i == 1 {
				return seen[[2]int{0, 1}]
			}
			return f
		}, 2},
		{"substituted", func(seen map[[2]int][]byte, conn, i int, f []byte) []byte {
			if i == 2 { // the second Set's "ok" is the first's
				return seen[[2]int{conn, 0}]
			}
			return f
		}, 1},
	} {
		srv := startServer(t, cfg)
		var mu sync.Mutex
		seen := map[[2]int][]byte{}
		r := startRelay(t, srv.Addr().String(), true, nil, func(conn, i int, f []byte) []byte {
			mu.Lock()
			defer mu.Unlock()
			seen[[2]int{conn, i}] = f
			return c.edit(seen, conn, i, f)
		})
		var last []byte
		var err error
		for n := 0; n < c.conns; n++ {
			cl, derr := DialStore(ctx, r.addr(), cfg)
			if derr != nil {
				t.Fatal(derr)
			}
			defer cl.Close()
			key := "k" + string(rune('0'+n))
			if err = cl.Set(ctx, key, []byte("v1")); err != nil {
				break
			}
			if last, err = cl.Get(ctx, key); err != nil || c.conns == 2 && n == 1 {
				break
			}
			if err = cl.Set(ctx, key, []byte("v2")); err != nil {
				last = nil
				break
			}
			last, err = cl.Get(ctx, key)
		}
		if !errors.Is(err, ErrFrameAuth) || last != nil {
			t.Errorf("%s reply: %q, %v; want a frame authentication error", c.name, last, err)
			continue
		}
		t.Logf("%s reply: %v", c.name, err)
	}
}
