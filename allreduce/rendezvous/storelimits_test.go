package rendezvous

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawRequest encodes one request as a client would.
func rawRequest(op byte, key string, val []byte, wait time.Duration) []byte {
	b := make([]byte, reqHeaderLen+len(key)+len(val))
	encodeRequest(b, request{op: op, keyLen: len(key), valLen: len(val), wait: wait})
	copy(b[reqHeaderLen:], key)
	copy(b[reqHeaderLen+len(key):], val)
	return b
}

// readReply reads one reply, whatever its length, checking its tags.
func readReply(c *rawConn) (byte, []byte, error) {
	var h [replyHeaderLen]byte
	if err := c.readRecord(h[:], 0); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(h[4:]))
	err := c.readRecord(body, 0)
	return h[0], body, err
}

// serverPort is the port srv listens on.
func serverPort(srv *StoreServer) int { return srv.Addr().(*net.TCPAddr).Port }

// closeWaits counts the sockets in CLOSE-WAIT on local port (the server's
// side of connections whose client hung up), or -1 without /proc/net/tcp.
func closeWaits(port int) int {
	n := -1
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n = max(n, 0)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 {
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			p, err := strconv.ParseUint(fields[1][i+1:], 16, 32)
			if err == nil && int(p) == port && fields[3] == "08" {
				n++
			}
		}
	}
	return n
}

// heapMB is the live heap after a collection, in MB.
func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / 1e6
}

// rssMB is the process's resident memory in MB (VmRSS), or -1.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1e3
		}
	}
	return -1
}

func TestMemStoreLimits(t *testing.T) {
	ctx := context.Background()
	m := NewMemStore()
	defer m.Close()
	m.MaxKeys = 3
	m.MaxStoredBytes = 3*EntryOverhead + 80
	if err := m.Set(ctx, "a", make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "b", make([]byte, 50)); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxStoredBytes") {
		t.Errorf("over the byte limit: %v", err)
	}
	// Replacing a value frees its bytes.
	if err := m.Set(ctx, "a", make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "b", make([]byte, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add(ctx, "n", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add(ctx, "x", 1); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxKeys") {
		t.Errorf("a fourth key: %v", err)
	}
	if err := m.Set(ctx, "y", nil); !errors.Is(err, ErrLimit) {
		t.Errorf("a fourth key: %v", err)
	}
	// Existing keys still change.
	if _, err := m.Add(ctx, "n", 1); err != nil {
		t.Fatal(err)
	}
	if keys, bytes := m.usage(); keys != 3 || bytes != 3*EntryOverhead+1+10+1+50+1+1 {
		t.Errorf("usage %d keys, %d bytes", keys, bytes)
	}
}

func TestStoreConfigLimitsChecked(t *testing.T) {
	cfg := testStoreConfig()
	cfg.MaxValueLen = 4 << 20
	cfg.MaxInFlightBytes = 1 << 20
	if _, err := ListenStore("127.0.0.1:0", cfg); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "MaxInFlightBytes") {
		t.Errorf("values longer than the in-flight limit: %v", err)
	}
	cfg = testStoreConfig()
	cfg.MaxValueLen = math.MaxInt
	cfg.MaxInFlightBytes = math.MaxInt64
	if _, err := ListenStore("127.0.0.1:0", cfg); !errors.Is(err, ErrInvalid) {
		t.Errorf("a value length beyond the protocol: %v", err)
	}
}

// TestStoreLimitErrors: every limit refuses with an error that wraps
// ErrLimit and names it, and the store goes on serving.
func TestStoreLimitErrors(t *testing.T) {
	ctx := context.Background()
	cfg := testStoreConfig()
	cfg.MaxValueLen = 1000
	cfg.MaxKeys = 4
	cfg.MaxStoredBytes = 2000 + 4*EntryOverhead + 100
	cfg.MaxInFlightBytes = 3 * (1000 + MaxKeyLen)
	srv := startServer(t, cfg)
	addr := srv.Addr().String()
	c, err := DialStore(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check := func(what string, err error, limit string) {
		t.Helper()
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s: %v; want ErrLimit naming %s", what, err, limit)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}

	// The client checks its own limit; a server with a lower one says so.
	check("value over the client's limit", c.Set(ctx, "v", make([]byte, 1001)), "MaxValueLen")
	big := cfg
	big.MaxValueLen = 1 << 20
	cb, err := DialStore(ctx, addr, big)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	check("value over the server's limit", cb.Set(ctx, "v", make([]byte, 1001)), "MaxValueLen")
	if err := cb.Set(ctx, "v", []byte("fine")); err != nil {
		t.Fatalf("the client's next call: %v", err)
	}

	// Stored bytes.
	for _, k := range []string{"a", "b"} {
		if err := c.Set(ctx, k, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	check("stored bytes", c.Set(ctx, "c", make([]byte, 1000)), "MaxStoredBytes")
	// Keys: "v", "a", "b", then one more.
	if _, err := c.Add(ctx, "n", 1); err != nil {
		t.Fatal(err)
	}
	check("keys (set)", c.Set(ctx, "d", nil), "MaxKeys")
	_, err = c.Add(ctx, "m", 1)
	check("keys (add)", err, "MaxKeys")

	// Request bytes in flight: three requests stalled mid-body hold the
	// budget; a fourth is refused at once.
	var stalled []net.Conn
	for i := 0; i < 3; i++ {
		rc := rawClient(t, addr)
		defer rc.Close()
		rc.Write(rawRequest(opSet, strings.Repeat("k", MaxKeyLen), make([]byte, 1000), 0)[:reqHeaderLen+10])
		stalled = append(stalled, rc)
	}
	waitFor(t, func() bool { return srv.Stats().InFlightBytes == 3*(1000+MaxKeyLen) })
	start := time.Now()
	check("requests in flight", c.Set(ctx, "a", make([]byte, 10)), "MaxInFlightBytes")
	if el := time.Since(start); el > time.Second {
		t.Errorf("refusal took %v", el)
	}
	for _, rc := range stalled {
		rc.Close()
	}
	waitFor(t, func() bool { return srv.Stats().InFlightBytes == 0 })
	if err := c.Set(ctx, "a", make([]byte, 10)); err != nil {
		t.Fatalf("after the stalled requests went: %v", err)
	}
	if v, err := c.Get(ctx, "a"); err != nil || len(v) != 10 {
		t.Fatalf("Get = %d bytes, %v", len(v), err)
	}
}

// TestStoreGetWaitBounded: a Get waits at most the server's Timeout, not
// what the client asks (here 49 days), and the answer says so.
func TestStoreGetWaitBounded(t *testing.T) {
	cfg := testStoreConfig()
	cfg.Timeout = 300 * time.Millisecond
	srv := startServer(t, cfg)
	c := rawClient(t, srv.Addr().String())
	defer c.Close()
	start := time.Now()
	c.Write(reqHeader(opGet, 5, 0, math.MaxUint32))
	c.Write([]byte("never"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	status, body, err := readReply(c)
	el := time.Since(start)
	if err != nil || status != stTimeout {
		t.Fatalf("reply %d %q, %v", status, body, err)
	}
	if el < 250*time.Millisecond || el > 3*time.Second {
		t.Errorf("answered after %v, want about 300ms", el)
	}
	if !strings.Contains(string(body), "Timeout") {
		t.Errorf("reply %q does not name the limit", body)
	}
	t.Logf("49-day Get answered after %v: %s", el.Round(time.Millisecond), body)

	// A client that asks for long gets the store's wait in its error.
	cc := cfg
	cc.Timeout = time.Hour
	cl, err := DialStore(context.Background(), srv.Addr().String(), cc)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Get(context.Background(), "never"); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "not set within 300ms") {
		t.Errorf("client Get: %v", err)
	}
}

// TestStoreGetClientHangsUp: Gets whose clients hang up end at once; the
// server keeps no connection and no socket in CLOSE-WAIT.
func TestStoreGetClientHangsUp(t *testing.T) {
	const n = 200
	srv := startServer(t, testStoreConfig())
	addr := srv.Addr().String()
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c := rawClient(t, addr)
		c.Write(rawRequest(opGet, fmt.Sprintf("never/%d", i), nil, time.Duration(math.MaxUint32)*time.Millisecond))
		conns = append(conns, c)
	}
	waitFor(t, func() bool { return srv.Stats().Conns == n })
	time.Sleep(50 * time.Millisecond) // every Get is waiting
	for _, c := range conns {
		c.Close()
	}
	start := time.Now()
	waitFor(t, func() bool { return srv.Stats().Conns == 0 })
	t.Logf("%d waiting Gets hung up: server down to 0 connections in %v; CLOSE-WAIT sockets: %d",
		n, time.Since(start).Round(time.Millisecond), closeWaits(serverPort(srv)))
	if cw := closeWaits(serverPort(srv)); cw > 0 {
		t.Errorf("%d sockets in CLOSE-WAIT", cw)
	}
	checkServes(t, srv)
}

// TestStoreHandshakeTimeout: a connection that does not authenticate is
// closed after HandshakeTimeout, and counted.
func TestStoreHandshakeTimeout(t *testing.T) {
	cfg := testStoreConfig()
	cfg.HandshakeTimeout = 300 * time.Millisecond
	srv := startServer(t, cfg)
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c)
	if el := time.Since(start); el < 250*time.Millisecond || el > 2*time.Second {
		t.Errorf("silent connection closed after %v, want about 300ms", el)
	}
	waitFor(t, func() bool { return srv.TurnedAway().Abandoned == 1 })
	if s := srv.TurnedAway().String(); !strings.Contains(s, "1 abandoned authentication") || !strings.Contains(s, "127.0.0.1 (1)") {
		t.Errorf("TurnedAway: %q", s)
	}
	if d := (StoreConfig{}).withDefaults().HandshakeTimeout; d > 2*time.Second {
		t.Errorf("default handshake timeout %v", d)
	}
}

func TestTurnedAwayHostsBounded(t *testing.T) {
	var l turnedAwayLog
	for i := 0; i < 100; i++ {
		l.note(turnEvicted, fmt.Sprintf("10.0.0.%d", i))
	}
	for i := 0; i < 5; i++ {
		l.note(turnRejected, "10.0.0.7")
	}
	r := l.report()
	if r.Total() != 105 || len(r.From) != MaxTurnedAwayHosts || r.From[0] != (HostCount{"10.0.0.7", 6}) || r.FromOthers != 100-MaxTurnedAwayHosts {
		t.Errorf("%+v", r)
	}
	want := "the store turned away 105 connections (100 evicted while authenticating, 5 failed authentication) from 10.0.0.7 (6), 10.0.0.0 (1)"
	if s := r.String(); !strings.HasPrefix(s, want) || !strings.HasSuffix(s, ", 84 from other hosts") {
		t.Errorf("String() = %q", s)
	}
	if s := (TurnedAway{}).String(); s != "" {
		t.Errorf("nothing turned away: %q", s)
	}
}

// TestStoreMemoryUnderSecretHolder: a secret holder claiming huge lengths,
// stalling bodies, filling every key and byte, waiting in Gets and never
// reading replies, all at once, leaves the server's heap bounded by the
// default limits (16 MiB in flight, 32 MiB stored). The heap measured is
// the whole test process's, attackers included.
func TestStoreMemoryUnderSecretHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the store's default limits")
	}
	cfg := testStoreConfig() // default limits
	srv := startServer(t, cfg)
	addr := srv.Addr().String()
	before := heapMB()
	peak := before
	sample := func(what string) {
		h := heapMB()
		peak = max(peak, h)
		st := srv.Stats()
		t.Logf("%-44s heap %5.1f MB, RSS %5.1f MB  (conns %d, keys %d, stored %.1f MB, in flight %.1f MB)",
			what, h, rssMB(), st.Conns, st.Keys, float64(st.StoredBytes)/1e6, float64(st.InFlightBytes)/1e6)
	}
	sample("before")
	var hold []*rawConn
	defer func() {
		for _, c := range hold {
			c.Close()
		}
	}()

	// 1. Keys until MaxKeys, pipelined.
	c := rawClient(t, addr)
	defer c.Close()
	setPastMaxKeys(t, c)
	sample(fmt.Sprintf("%d keys", DefaultMaxKeys))

	// 2. Huge values until MaxStoredBytes (replacing existing keys).
	cl, err := DialStore(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, DefaultMaxValueLen)
	var fullErr error
	for i := 0; i < 64 && fullErr == nil; i++ {
		fullErr = cl.Set(context.Background(), fmt.Sprintf("k%d", i), val)
	}
	if !errors.Is(fullErr, ErrLimit) || !strings.Contains(fullErr.Error(), "MaxStoredBytes") {
		t.Errorf("filling the store: %v", fullErr)
	}
	sample("32 MiB stored")

	// 3. Huge claimed lengths: 4 GiB claims are refused from the header;
	// 1 MiB claims stall mid-body, and those past 16 MiB are refused.
	for i := 0; i < 8; i++ {
		c := rawClient(t, addr)
		c.Write(reqHeader(opSet, 4, math.MaxUint32, 0))
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if st, body, err := readReply(c); err != nil || st != stLimit {
			t.Fatalf("4 GiB claim: %d %q %v", st, body, err)
		}
		c.Close()
	}
	stallBodies(t, srv, addr, &hold)
	sample("stalled bodies")

	// 4. Gets that wait 49 days, and Gets of a 1 MiB value whose replies
	// are never read.
	for i := 0; i < 300; i++ {
		c := rawClient(t, addr)
		hold = append(hold, c)
		c.Write(rawRequest(opGet, "never", nil, time.Duration(math.MaxUint32)*time.Millisecond))
	}
	for i := 0; i < 100; i++ {
		c := rawClient(t, addr)
		hold = append(hold, c)
		c.Write(rawRequest(opGet, "k0", nil, 0))
	}
	time.Sleep(200 * time.Millisecond)
	sample("+300 waiting Gets, 100 unread 1 MiB replies")
	if peak-before > 100 {
		t.Errorf("heap grew by %.1f MB under attack, want < 100 MB", peak-before)
	}

	// Hanging up frees everything.
	for _, c := range hold {
		c.Close()
	}
	hold = nil
	waitFor(t, func() bool { st := srv.Stats(); return st.Conns <= 2 && st.InFlightBytes == 0 })
	sample("attackers gone")
	if cw := closeWaits(serverPort(srv)); cw > 0 {
		t.Errorf("%d sockets in CLOSE-WAIT", cw)
	}
	t.Logf("heap: %.1f MB before, %.1f MB at peak (+%.1f MB)", before, peak, peak-before)
	if v, err := cl.Get(context.Background(), "k0"); err != nil || len(v) != DefaultMaxValueLen {
		t.Fatalf("after the attack: Get = %d bytes, %v", len(v), err)
	}
}

// setPastMaxKeys pipelines Sets of DefaultMaxKeys+10 keys on the raw
// connection c and checks that the last 10 are refused naming MaxKeys.
func setPastMaxKeys(t *testing.T, c *rawConn) {
	var wg sync.WaitGroup
	wg.Add(1)
	var limited int
	var lastErr string
	go func() {
		defer wg.Done()
		for i := 0; i < DefaultMaxKeys+10; i++ {
			st, body, err := readReply(c)
			if err != nil {
				t.Error(err)
				return
			}
			if st == stLimit {
				limited++
				lastErr = string(body)
			}
		}
	}()
	var batch bytes.Buffer
	for i := 0; i < DefaultMaxKeys+10; i++ {
		batch.Write(rawRequest(opSet, fmt.Sprintf("k%d", i), nil, 0))
		if batch.Len() > 64<<10 {
			c.Write(batch.Bytes())
			batch.Reset()
		}
	}
	c.Write(batch.Bytes())
	wg.Wait()
	if limited != 10 || !strings.Contains(lastErr, "MaxKeys") {
		t.Errorf("%d refusals past MaxKeys, last %q", limited, lastErr)
	}
}

// stallBodies opens 40 connections to srv at addr (added to hold) that
// claim 1 MiB bodies and stall after 4 bytes, waits until the bytes in
// flight near MaxInFlightBytes, and checks that every reply is a
// MaxInFlightBytes refusal.
func stallBodies(t *testing.T, srv *StoreServer, addr string, hold *[]*rawConn) {
	refused := 0
	for i := 0; i < 40; i++ {
		c := rawClient(t, addr)
		*hold = append(*hold, c)
		c.Write(reqHeader(opSet, 4, DefaultMaxValueLen, 0))
		c.Write([]byte("stal"))
	}
	waitFor(t, func() bool { return srv.Stats().InFlightBytes > DefaultMaxInFlightBytes-(DefaultMaxValueLen+MaxKeyLen) })
	for _, c := range *hold {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if st, body, err := readReply(c); err == nil {
			if st != stLimit || !strings.Contains(string(body), "MaxInFlightBytes") {
				t.Errorf("refusal %d %q", st, body)
			}
			refused++
		}
	}
	t.Logf("40 stalled 1 MiB bodies: %d refused with %q", refused, "MaxInFlightBytes")
}
