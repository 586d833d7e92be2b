package tcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/untrusted"
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
	b.Secret = []byte("another secret, also long")
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
	addr, errc := listenAlone(t, func(cfg *Config) { cfg.ConnectTimeout = time.Second })
	nc, err := net.Dial("tcp", addr)
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
	var b [prefixLen]byte
	putPrefix(b[:], hsRefuse, modeHMAC)
	binary.BigEndian.PutUint16(b[4:], ProtocolVersion+1)
	dialFakePeer(t, b[:], "protocol version mismatch")
}

// dialFakePeer dials, as rank 1 of 2, a rank 0 that answers with reply,
// and checks that the dialer gives up at once with an error saying want.
func dialFakePeer(t *testing.T, reply []byte, want string) {
	t.Helper()
	store := rendezvous.NewMemStore()
	_ = store.Set(context.Background(), addrKey("test", 0), []byte(transporthelp.FakePeer(t, reply)))
	start := time.Now()
	c, err := Dial(context.Background(), testConfig(1, 2, store))
	if c != nil {
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dialer: %v, want %q", err, want)
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

// strangerHello is a well-formed hello from "rank 1 of 2" of run "test",
// which anyone can write: nothing in it needs the secret.
func strangerHello(version uint16) []byte {
	hello := make([]byte, helloFixed, helloFixed+4)
	putPrefix(hello, hsHello, modeHMAC)
	binary.BigEndian.PutUint16(hello[4:], version)
	binary.BigEndian.PutUint32(hello[8:], 2)
	binary.BigEndian.PutUint32(hello[12:], 1)
	binary.BigEndian.PutUint32(hello[16:], 0)
	hello[helloWire] = wireCode(DefaultWireProtection)
	hello[helloWire+1] = wireCode(WireNone) // auto over loopback
	for i := range nonceLen {
		hello[helloNonce+i] = byte(i)
	}
	hello[helloFixed-1] = 4
	return append(hello, "test"...)
}

// listenAlone starts rank 0 of 2 with cfg's timeouts and returns its
// address and its Dial's error, once it fails.
func listenAlone(t *testing.T, mod func(*Config)) (string, <-chan error) {
	t.Helper()
	store := rendezvous.NewMemStore()
	cfg := testConfig(0, 2, store)
	cfg.ConnectTimeout = 1500 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
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
	return string(addr), errc
}

// TestStrangerGetsNoMAC is a guessing attempt: a stranger sends a
// well-formed hello and a proof it cannot make (a guess), and receives
// exactly a challenge (a fresh nonce) and a refusal in words — nothing
// computed with the secret, so nothing to test further guesses against
// offline. The listening rank goes on listening and, when its time is up,
// names the failed proof.
func TestStrangerGetsNoMAC(t *testing.T) {
	addr, errc := listenAlone(t, nil)
	for _, proof := range map[string][]byte{
		"guessed proof": func() []byte {
			b := make([]byte, proofLen)
			putPrefix(b, hsProof, modeHMAC)
			copy(b[prefixLen:], hsMAC([]byte("a guess at the secret"), labelDialer, []byte("anything")))
			return b
		}(),
		"version 2 proof (status, reason, mac)": func() []byte {
			b := make([]byte, prefixLen+3+macLen)
			putPrefix(b, hsProof, modeHMAC)
			return b
		}(),
		"no proof": nil,
	} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write(append(strangerHello(ProtocolVersion), proof...)); err != nil {
			t.Fatal(err)
		}
		if proof == nil {
			_ = nc.(*net.TCPConn).CloseWrite()
		}
		got, _ := io.ReadAll(nc)
		nc.Close()
		// A challenge: the prefix and a nonce, nothing else.
		if len(got) < challengeLen {
			t.Fatalf("received %d bytes %x, want a challenge", len(got), got)
		}
		want := make([]byte, prefixLen)
		putPrefix(want, hsChallenge, modeHMAC)
		if !bytes.Equal(got[:prefixLen], want) {
			t.Fatalf("received %x, want a challenge", got)
		}
		rest := got[challengeLen:]
		if proof == nil {
			if len(rest) != 0 {
				t.Errorf("no proof: received %x after the challenge", rest)
			}
			continue
		}
		// Then a refusal, in words, and the end.
		putPrefix(want, hsRefuse, modeHMAC)
		if len(rest) < prefixLen+2 || !bytes.Equal(rest[:prefixLen], want) {
			t.Fatalf("received %x after the challenge, want a refusal", rest)
		}
		n := int(binary.BigEndian.Uint16(rest[prefixLen:]))
		reason := rest[prefixLen+2:]
		if n != len(reason) || untrusted.Printable(reason) != string(reason) || !strings.Contains(string(reason), "authentication failed") {
			t.Fatalf("refusal %x (%q): want %d printable bytes saying authentication failed, and nothing after", rest, reason, n)
		}
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "failed the proof") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("listening rank: %v, want it to count the failed proofs and say from where", err)
	}
}

// TestListenerRepliesIndependentOfSecret: with the nonces fixed, whatever
// an unauthenticated peer sends (a hello, a wrong proof) gets a listening
// rank to send the very same bytes whatever its secret — so nothing it
// sends before the proof checks depends on the secret.
func TestListenerRepliesIndependentOfSecret(t *testing.T) {
	badProof := make([]byte, proofLen)
	putPrefix(badProof, hsProof, modeHMAC)
	in := append(strangerHello(ProtocolVersion), badProof...)
	var sent [][]byte
	for _, secret := range [][]byte{testSecret, []byte("a completely different secret")} {
		p := &handshakeParams{secret: secret, mode: modeHMAC, size: 2, rank: 0, runID: "test", rand: zeroReader{}}
		nc := &fakeConn{r: bytes.NewReader(in)}
		res, err := acceptHandshake(nc, p, acceptHooks{admit: func(int) string { return "" }, release: func(int) {}})
		if res.out != acceptNote || !res.badProof {
			t.Fatalf("outcome %v (%v), want a failed proof", res.out, err)
		}
		sent = append(sent, nc.w.Bytes())
	}
	if !bytes.Equal(sent[0], sent[1]) {
		t.Errorf("the replies differ with the secret:\n%x\n%x", sent[0], sent[1])
	}
}

// TestOlderPeerRefused: a rank of a previous protocol (version 2, where
// the listener answered a hello with a MAC; version 3, without the link's
// resolved protection in the handshake) is refused before anything else
// is read, with both versions named, on both sides, and the refusal names
// no rank (the peer has proved nothing).
func TestOlderPeerRefused(t *testing.T) {
	for _, old := range []uint16{2, 3} {
		addr, errc := listenAlone(t, nil)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write(strangerHello(old)); err != nil {
			t.Fatal(err)
		}
		reply, _ := io.ReadAll(nc)
		// What an older rank reads: a prefix of this version (so it reports
		// "the peer speaks version 4, this rank version 3"), and the reason.
		want := fmt.Sprintf("protocol version %d, not %d", ProtocolVersion, old)
		if len(reply) < prefixLen || binary.BigEndian.Uint16(reply[4:]) != ProtocolVersion || reply[6] != hsRefuse ||
			!strings.Contains(string(reply), want) || strings.Contains(string(reply), "rank 0") {
			t.Errorf("reply %q: want a version %d refusal saying %q and naming no rank", reply, ProtocolVersion, want)
		}
		want = fmt.Sprintf("the peer speaks version %d, this rank version %d", old, ProtocolVersion)
		if err := <-errc; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("listening rank: %v, want it to name both versions", err)
		}
	}
}

// TestDialerRefusesOlderListener: a dialing rank that reaches a version 3
// listener (which refuses the hello with a version 3 prefix) gives up at
// once naming both versions.
func TestDialerRefusesOlderListener(t *testing.T) {
	b := make([]byte, prefixLen, prefixLen+40)
	putPrefix(b, hsRefuse, modeHMAC)
	binary.BigEndian.PutUint16(b[4:], 3)
	dialFakePeer(t, appendReason(b, "the listening rank speaks protocol version 3, not 4"), "the peer speaks version 3, this rank version 4")
}

// TestWeakSecretRefused: Config validation refuses weak secrets, naming
// the rule and never the secret; Insecure needs none.
func TestWeakSecretRefused(t *testing.T) {
	store := rendezvous.NewMemStore()
	for name, secret := range map[string]string{
		"short":          "s3cr3t-pass",
		"digits":         "12345678901234567890",
		"repeated byte":  "xxxxxxxxxxxxxxxxxxxxxxxx",
		"two symbols":    "abababababababababab",
		"seven symbols":  "abcdefgabcdefgabcdefg",
		"six-digit code": "314159",
	} {
		cfg := testConfig(0, 2, store)
		cfg.Secret = []byte(secret)
		c, err := Dial(context.Background(), cfg)
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, transport.ErrInvalid) || !errors.Is(err, rendezvous.ErrWeakSecret) ||
			!strings.Contains(err.Error(), "at least 16 bytes, not all digits, at least 8 distinct byte values") {
			t.Errorf("%s: %v, want a weak-secret error naming the rule", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
	for name, cfg := range map[string]Config{
		"launcher's":      {Rank: 0, Size: 2, Store: store, Secret: []byte(strings.Repeat("0123456789abcdef", 4))},
		"a phrase":        {Rank: 0, Size: 2, Store: store, Secret: testSecret},
		"insecure":        {Rank: 0, Size: 2, Store: store, Insecure: true},
		"one rank":        {Rank: 0, Size: 1, Secret: []byte("x")},
		"insecure, short": {Rank: 0, Size: 2, Store: store, Insecure: true, Secret: []byte("x")},
	} {
		if _, err := cfg.withDefaults(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// pipeHandshake runs both sides of one handshake over a pipe: the dialer
// with rank from, the acceptor with rank to.
func pipeHandshake(t *testing.T, secret []byte, mode byte, from, to int, runID string) (dialKey, acceptKey wireKey) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	pd := &handshakeParams{secret: secret, mode: mode, size: 4, rank: from, runID: runID}
	pa := &handshakeParams{secret: secret, mode: mode, size: 4, rank: to, runID: runID}
	errc := make(chan error, 1)
	go func() {
		res, err := acceptHandshake(b, pa, acceptHooks{admit: func(int) string { return "" }, release: func(int) {}})
		acceptKey = res.s.key
		errc <- err
	}()
	ds, _, err := dialHandshake(a, pd, to)
	dialKey = ds.key
	if err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
	return dialKey, acceptKey
}

// TestSessionKey: both ends of a link derive the same key, which differs
// per link, per connection and per secret, is all zeros when insecure, and
// is what the doc comment says:
// HMAC-SHA256(secret, "ringddp wire key v1\x00" | nonceD | nonceA | from u32 | to u32 | runLen u8 | runID).
func TestSessionKey(t *testing.T) {
	seen := map[wireKey]string{}
	for _, c := range []struct {
		name     string
		secret   []byte
		from, to int
	}{
		{"link 1→0", testSecret, 1, 0},
		{"link 1→0 again", testSecret, 1, 0},
		{"link 2→0", testSecret, 2, 0},
		{"link 2→1", testSecret, 2, 1},
		{"another secret", []byte("another secret, also long"), 1, 0},
	} {
		d, a := pipeHandshake(t, c.secret, modeHMAC, c.from, c.to, "test")
		if d != a {
			t.Fatalf("%s: the ends derive different keys %x and %x", c.name, d, a)
		}
		if d == (wireKey{}) {
			t.Fatalf("%s: zero key", c.name)
		}
		if other, ok := seen[d]; ok {
			t.Fatalf("%s: the same key as %s", c.name, other)
		}
		seen[d] = c.name
	}
	if d, a := pipeHandshake(t, nil, modeInsecure, 1, 0, "test"); d != (wireKey{}) || a != (wireKey{}) {
		t.Errorf("insecure: keys %x, %x, want zeros", d, a)
	}

	// The documented formula, with fixed nonces.
	nonceD, nonceA := bytes.Repeat([]byte{0xd}, nonceLen), bytes.Repeat([]byte{0xa}, nonceLen)
	hello := make([]byte, helloFixed, helloFixed+4)
	putPrefix(hello, hsHello, modeHMAC)
	binary.BigEndian.PutUint32(hello[8:], 4)
	binary.BigEndian.PutUint32(hello[12:], 3)
	binary.BigEndian.PutUint32(hello[16:], 1)
	copy(hello[helloNonce:], nonceD)
	hello[helloFixed-1] = 4
	hello = append(hello, "test"...)
	got := deriveKey(&handshakeParams{secret: testSecret, mode: modeHMAC}, hello, nonceA)
	m := hmac.New(sha256.New, testSecret)
	m.Write([]byte("ringddp wire key v1\x00"))
	m.Write(nonceD)
	m.Write(nonceA)
	m.Write([]byte{0, 0, 0, 3, 0, 0, 0, 1, 4, 't', 'e', 's', 't'})
	if want := m.Sum(nil); !bytes.Equal(got[:], want) {
		t.Errorf("key %x, want %x", got, want)
	}
}

// TestWireProtectionMismatch: ranks configured with different wire
// protection are refused at Dial on both sides, naming both modes.
func TestWireProtectionMismatch(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 2, store)
	a.WireProtection, b.WireProtection = WireMAC, WireAEAD
	expectBoth(t, []Config{a, b}, "wire protection mismatch", "rank 0 uses mac, rank 1 uses aead")
}

// TestPreAuthRefusalsNameNoRank: what a listening rank sends a peer that
// has not proved the secret (a refusal for another version, another
// security mode, or a failed proof) names no rank and no world size.
func TestPreAuthRefusalsNameNoRank(t *testing.T) {
	badProof := make([]byte, proofLen)
	putPrefix(badProof, hsProof, modeHMAC)
	insecure := strangerHello(ProtocolVersion)
	insecure[7] = modeInsecure
	for name, in := range map[string][]byte{
		"older version": strangerHello(ProtocolVersion - 1),
		"insecure":      insecure,
		"failed proof":  append(strangerHello(ProtocolVersion), badProof...),
	} {
		p := &handshakeParams{secret: testSecret, mode: modeHMAC, size: 11, rank: 7, runID: "test", rand: zeroReader{}}
		nc := &fakeConn{r: bytes.NewReader(in)}
		res, err := acceptHandshake(nc, p, acceptHooks{admit: func(int) string { return "" }, release: func(int) {}})
		if res.out != acceptNote {
			t.Fatalf("%s: outcome %v (%v), want a refusal", name, res.out, err)
		}
		sent := nc.w.String()
		if !strings.Contains(sent, "listening rank") && !strings.Contains(sent, "this rank") {
			t.Errorf("%s: sent %q, want a refusal in words", name, sent)
		}
		if strings.ContainsAny(sent, "7") || strings.Contains(sent, "11") {
			t.Errorf("%s: the refusal %q names the rank or the world size", name, sent)
		}
	}
}
