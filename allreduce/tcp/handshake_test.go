package tcp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// expectBoth dials cfgs concurrently and checks that every one fails with
// an error containing each of the texts.
func expectBoth(t *testing.T, cfgs []Config, texts ...string) {
	t.Helper()
	conns, errs := dialConfigs(cfgs)
	for i, err := range errs {
		if conns[i] != nil {
			conns[i].Close()
		}
		if err == nil {
			t.Errorf("dial %d (rank %d): succeeded, want an error", i, cfgs[i].Rank)
			continue
		}
		t.Logf("dial %d (rank %d): %v", i, cfgs[i].Rank, err)
		for _, s := range texts {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("dial %d (rank %d): %v\n  want it to mention %q", i, cfgs[i].Rank, err, s)
			}
		}
	}
}

func TestWrongSecret(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 2, store)
	b.Secret = []byte("another secret")
	// The acceptor cannot tell an impostor from a misconfigured rank, so
	// it keeps listening and reports the refusal when its time runs out.
	a.ConnectTimeout = 1500 * time.Millisecond
	start := time.Now()
	expectBoth(t, []Config{a, b}, "authentication failed", "secret")
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
}

func TestWrongWorldSize(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 3, store)
	expectBoth(t, []Config{a, b}, "world size mismatch", "rank 0 has world size 2", "rank 1 has 3")
}

func TestRunIDMismatch(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 2, store)
	b.RunID = "other"
	// Rank 1 finds rank 0's address under its own run's key only if
	// someone published it there: do, to make the ranks meet.
	conns, errs := make([]*Conn, 2), make([]error, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		conns[0], errs[0] = Dial(context.Background(), a)
	}()
	v, err := store.Get(context.Background(), addrKey("test", 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(context.Background(), addrKey("other", 0), v); err != nil {
		t.Fatal(err)
	}
	conns[1], errs[1] = Dial(context.Background(), b)
	<-done
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "run id mismatch") {
			t.Errorf("rank %d: %v, want a run id mismatch", i, err)
		}
		if conns[i] != nil {
			conns[i].Close()
		}
	}
}

func TestDuplicateRank(t *testing.T) {
	store := rendezvous.NewMemStore()
	// Ranks 0, 1 and 1 of 3: rank 0 sees rank 1 twice.
	cfgs := []Config{testConfig(0, 3, store), testConfig(1, 3, store), testConfig(1, 3, store)}
	start := time.Now()
	expectBoth(t, cfgs, "duplicate rank 1")
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v; the duplicate should fail every rank at once", el)
	}
}

func TestSecretModeMismatch(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 2, store)
	b.Secret, b.Insecure = nil, true
	a.ConnectTimeout = time.Second
	expectBoth(t, []Config{a, b}, "insecure")
}

// TestOtherProtocolVersion: a dialer speaking another version is refused
// with the reason, and the listening rank names it when it gives up.
func TestOtherProtocolVersion(t *testing.T) {
	store := rendezvous.NewMemStore()
	cfg := testConfig(0, 2, store)
	cfg.ConnectTimeout = time.Second
	errc := make(chan error, 1)
	go func() {
		c, err := Dial(context.Background(), cfg)
		if c != nil {
			c.Close()
		}
		errc <- err
	}()
	addr, err := store.Get(context.Background(), addrKey("test", 0))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var hello [helloFixed]byte
	putPrefix(hello[:], hsHello, modeHMAC)
	binary.BigEndian.PutUint16(hello[4:], ProtocolVersion+1)
	if _, err := nc.Write(hello[:]); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, _ := io.ReadAll(nc)
	if !strings.Contains(string(reply), "protocol version") {
		t.Errorf("refusal %q does not name the protocol version", reply)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("listening rank: %v, want it to mention the protocol version", err)
	}

	// And a dialer that reaches a listener of another version gives up at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [prefixLen]byte
		putPrefix(b[:], hsRefuse, modeHMAC)
		binary.BigEndian.PutUint16(b[4:], ProtocolVersion+1)
		_, _ = c.Write(b[:])
		_, _ = io.Copy(io.Discard, c)
	}()
	store2 := rendezvous.NewMemStore()
	_ = store2.Set(context.Background(), addrKey("test", 0), []byte(ln.Addr().String()))
	start := time.Now()
	c, err := Dial(context.Background(), testConfig(1, 2, store2))
	if c != nil {
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "protocol version mismatch") {
		t.Errorf("dialer: %v, want a protocol version mismatch", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("dialer took %v", el)
	}
}

// TestMissingRankTimesOut: the error names the ranks that never came.
func TestMissingRankTimesOut(t *testing.T) {
	store := rendezvous.NewMemStore()
	cfgs := []Config{testConfig(0, 3, store), testConfig(1, 3, store)}
	for i := range cfgs {
		cfgs[i].ConnectTimeout = 500 * time.Millisecond
	}
	expectBoth(t, cfgs, "no connection with rank(s) 2")
}
