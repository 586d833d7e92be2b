package tcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

var protectedModes = []WireProtection{WireMAC, WireAEAD}

func randomKey(t testing.TB) wireKey {
	var k wireKey
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestWireProtectionConfig(t *testing.T) {
	base := func() Config { return testConfig(0, 2, rendezvous.NewMemStore()) }
	for _, tc := range []struct {
		mode     WireProtection
		insecure bool
		want     WireProtection
		err      string
	}{
		{"", false, DefaultWireProtection, ""},
		{"", true, WireNone, ""},
		{WireNone, false, WireNone, ""},
		{WireNone, true, WireNone, ""},
		{WireMAC, false, WireMAC, ""},
		{WireAEAD, false, WireAEAD, ""},
		{"MAC", false, WireMAC, ""},
		{WireMAC, true, "", "needs the job's secret"},
		{WireAEAD, true, "", "needs the job's secret"},
		{"hmac", false, "", "unknown mode"},
		{WireAuto, false, WireAuto, ""},
		{"Auto", false, WireAuto, ""},
		{WireAuto, true, "", "needs the job's secret"},
	} {
		cfg := base()
		cfg.WireProtection = tc.mode
		if tc.insecure {
			cfg.Secret, cfg.Insecure = nil, true
		}
		got, err := cfg.withDefaults()
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, transport.ErrInvalid)):
			t.Errorf("%q insecure=%v: got %v, want an ErrInvalid mentioning %q", tc.mode, tc.insecure, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q insecure=%v: %v", tc.mode, tc.insecure, err)
		case tc.err == "" && got.WireProtection != tc.want:
			t.Errorf("%q insecure=%v: mode %q, want %q", tc.mode, tc.insecure, got.WireProtection, tc.want)
		}
	}
	if m, err := ParseWireProtection(" aead "); err != nil || m != WireAEAD {
		t.Errorf("ParseWireProtection: %q, %v", m, err)
	}
}

// TestWireAutoPerLink: auto is mac on a link between hosts and none on a
// link within one (the same address at both ends, or loopback at both);
// the other modes are what they say on every link.
func TestWireAutoPerLink(t *testing.T) {
	addr := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234} }
	for _, tc := range []struct {
		local, remote string
		same          bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", true},
		{"::1", "::1", true},
		{"10.0.0.5", "10.0.0.5", true},
		{"10.0.0.5", "10.0.0.6", false},
		{"192.168.1.2", "127.0.0.1", false},
		{"::ffff:10.0.0.5", "10.0.0.5", true},
	} {
		if got := sameHost(addr(tc.local), addr(tc.remote)); got != tc.same {
			t.Errorf("sameHost(%s, %s) = %v, want %v", tc.local, tc.remote, got, tc.same)
		}
	}
	if sameHost(&net.UnixAddr{Name: "x"}, addr("127.0.0.1")) {
		t.Error("sameHost of a non-TCP address: true, want false (protect when unsure)")
	}
	for _, tc := range []struct {
		mode          WireProtection
		within, cross WireProtection
	}{
		{WireAuto, WireNone, WireMAC},
		{WireNone, WireNone, WireNone},
		{WireMAC, WireMAC, WireMAC},
		{WireAEAD, WireAEAD, WireAEAD},
	} {
		if got := tc.mode.forLink(true); got != tc.within {
			t.Errorf("%s within a host: %s, want %s", tc.mode, got, tc.within)
		}
		if got := tc.mode.forLink(false); got != tc.cross {
			t.Errorf("%s between hosts: %s, want %s", tc.mode, got, tc.cross)
		}
	}
}

// TestWireDirBinding: a record opens only under the direction, mode, key
// and counter it was sealed for.
func TestWireDirBinding(t *testing.T) {
	key := randomKey(t)
	for _, mode := range protectedModes {
		seal := func() []byte {
			d, err := newWireDir(mode, key, 0, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			return d.appendRecord(nil, []byte("seven bytes"))
		}
		open := func(mode WireProtection, key wireKey, from, to int, skip int64, rec []byte) error {
			d, err := newWireDir(mode, key, from, to, to)
			if err != nil {
				t.Fatal(err)
			}
			d.skip(skip)
			return d.open(bytes.Clone(rec))
		}
		rec := seal()
		if bytes.Contains(rec, []byte("seven")) == (mode == WireAEAD) {
			t.Errorf("%s: plaintext visible %v in %q", mode, mode != WireAEAD, rec)
		}
		other := WireMAC
		if mode == WireMAC {
			other = WireAEAD
		}
		if err := open(mode, key, 0, 1, 0, rec); err != nil {
			t.Errorf("%s: valid record refused: %v", mode, err)
		}
		for name, err := range map[string]error{
			"reflected":     open(mode, key, 1, 0, 0, rec),
			"other mode":    open(other, key, 0, 1, 0, rec),
			"other key":     open(mode, randomKey(t), 0, 1, 0, rec),
			"other counter": open(mode, key, 0, 1, 1, rec),
			"other link":    open(mode, key, 0, 2, 0, rec),
			"truncated":     open(mode, key, 0, 1, 0, rec[:len(rec)-1]),
			"short":         open(mode, key, 0, 1, 0, rec[:3]),
		} {
			if !errors.Is(err, ErrWireAuth) {
				t.Errorf("%s, %s: got %v, want ErrWireAuth", mode, name, err)
			}
		}
		for i := range rec {
			bad := bytes.Clone(rec)
			bad[i] ^= 0x20
			if err := open(mode, key, 0, 1, 0, bad); !errors.Is(err, ErrWireAuth) {
				t.Fatalf("%s: byte %d flipped: got %v", mode, i, err)
			}
		}
	}
}

// protectedPeer is rawPeer under wire protection: rank 0's link to rank 1
// is a socket the test writes to, and the wireDir seals what it writes as
// rank 1 would.
func protectedPeer(t testing.TB, mode WireProtection, key wireKey) (*Conn, *net.TCPConn, *wireDir) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{Rank: 0, Size: 2, Store: rendezvous.NewMemStore(), Secret: testSecret, Timeout: 5 * time.Second,
		WireProtection: mode, Spin: -1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(cfg)
	l := newLink(c, 1, nc.(*net.TCPConn), session{key: key, mode: cfg.WireProtection.forLink(true)})
	c.core.Links[1] = l
	c.ready.Store(true)
	l.start()
	t.Cleanup(func() {
		raw.Close() // first: a reader draining after a failed check stops at EOF
		c.Close()
	})
	var d *wireDir
	if mode != WireNone {
		if d, err = newWireDir(mode, key, 1, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	return c, raw.(*net.TCPConn), d
}

// sealFrame is a data frame as d sends it.
func sealFrame(d *wireDir, h transport.Header, p []byte) []byte {
	f := frame{typ: typeData, h: h, length: int64(len(p))}
	b := d.appendHeader(nil, &f)
	for off := 0; off < len(p); off += pieceSize {
		b = d.appendRecord(b, p[off:min(off+pieceSize, len(p))])
	}
	return b
}

// TestWireZeroKey: a protected link without a session key refuses to run
// (its keys would be public).
func TestWireZeroKey(t *testing.T) {
	c, _, _ := protectedPeer(t, WireMAC, wireKey{})
	err := c.Send(context.Background(), 1, hdr(0, 0), []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "session key") {
		t.Fatalf("got %v, want a refusal for want of a session key", err)
	}
}

// TestWireProtectedFrames: what a protected peer sends is received
// (pieces and placed), and a frame altered anywhere — header, payload,
// tag — or cut short fails the receive with ErrWireAuth, without
// allocating what the frame claims.
func TestWireProtectedFrames(t *testing.T) {
	for _, mode := range protectedModes {
		for _, n := range []int{0, 100, 3*pieceSize + 5} {
			for _, placed := range []bool{false, true} {
				key := randomKey(t)
				msg := pattern(n, 3)
				wireLen := headerLen + tagLen + n + int(records(int64(n)))*tagLen
				flips := []int{-1, 4, 20, headerLen + 3, wireLen - 1}
				if n > 0 {
					flips = append(flips, headerLen+tagLen+n/2+n/2/pieceSize*tagLen)
				}
				for _, at := range flips {
					c, raw, d := protectedPeer(t, mode, key)
					wire := sealFrame(d, hdr(0, 0), msg)
					if at >= 0 {
						wire[at] ^= 1
					}
					var sink transport.Sink = &bufSink{dst: make([]byte, n)}
					if placed {
						sink = &placeSink{dst: make([]byte, n)}
					}
					errc := make(chan error, 1)
					go func() { errc <- c.Recv(context.Background(), 1, hdr(0, 0), n, sink) }()
					_, _ = raw.Write(wire)
					err := <-errc
					if at < 0 {
						var got []byte
						if ps, ok := sink.(*placeSink); ok {
							got = ps.dst
						} else {
							got = sink.(*bufSink).dst
						}
						if err != nil || !bytes.Equal(got, msg) {
							t.Errorf("%s, %d bytes, placed %v: valid frame: %v", mode, n, placed, err)
						}
						continue
					}
					if !errors.Is(err, ErrWireAuth) || !strings.Contains(err.Error(), "link to rank 1") {
						t.Errorf("%s, %d bytes, placed %v, byte %d flipped: got %v, want ErrWireAuth naming the link", mode, n, placed, at, err)
					}
				}
			}
		}
	}
}

// TestWireMACRefusesNone: a protected rank refuses plain frames.
func TestWireMACRefusesNone(t *testing.T) {
	for _, mode := range protectedModes {
		c, raw, _ := protectedPeer(t, mode, randomKey(t))
		errc := make(chan error, 1)
		go func() { errc <- c.Recv(context.Background(), 1, hdr(0, 0), 64, discardSink{}) }()
		b := make([]byte, headerLen+64)
		encodeHeader(b, &frame{typ: typeData, h: hdr(0, 0), length: 64})
		_, _ = raw.Write(b)
		if err := <-errc; !errors.Is(err, ErrWireAuth) || !strings.Contains(err.Error(), "does not use -wire-protection "+string(mode)) {
			t.Errorf("%s: got %v, want ErrWireAuth suggesting a mode mismatch", mode, err)
		}
	}
}

// TestWireNoneRefusesMAC: a rank without protection tells a peer that
// sends MAC-protected frames from garbage.
func TestWireNoneRefusesMAC(t *testing.T) {
	c, raw, _ := protectedPeer(t, WireNone, wireKey{})
	d, err := newWireDir(WireMAC, randomKey(t), 1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Recv(context.Background(), 1, hdr(0, 0), 8, discardSink{}) }()
	_, _ = raw.Write(sealFrame(d, hdr(0, 0), make([]byte, 8)))
	if err := <-errc; !errors.Is(err, ErrWireAuth) || !strings.Contains(err.Error(), "mismatch") {
		t.Fatalf("got %v, want a wire protection mismatch", err)
	}
}

// FuzzProtectedFrame feeds a protected link's reader arbitrary bytes,
// seeded with valid frames: it must not panic, and must deliver a message
// only if the bytes begin with exactly the frame that was sealed.
func FuzzProtectedFrame(f *testing.F) {
	var key wireKey
	copy(key[:], "a fixed key for the fuzzer.....!")
	const n = 1000
	msg := pattern(n, 9)
	valid := map[WireProtection][]byte{}
	for i, mode := range protectedModes {
		d, err := newWireDir(mode, key, 1, 0, 1)
		if err != nil {
			f.Fatal(err)
		}
		valid[mode] = sealFrame(d, hdr(0, 0), msg)
		f.Add(uint8(i), valid[mode])
		ab := d.appendHeader(nil, &frame{typ: typeAbort, length: 5})
		f.Add(uint8(i), d.appendRecord(ab, []byte("cause")))
	}
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, m uint8, b []byte) {
		mode := protectedModes[int(m)%len(protectedModes)]
		c, raw, _ := protectedPeer(t, mode, key)
		errc := make(chan error, 1)
		sink := &bufSink{dst: make([]byte, n)}
		go func() { errc <- c.Recv(context.Background(), 1, hdr(0, 0), n, sink) }()
		_, _ = raw.Write(b)
		_ = raw.CloseWrite()
		err := <-errc
		if err == nil && (!bytes.HasPrefix(b, valid[mode]) || !bytes.Equal(sink.dst, msg)) {
			t.Fatalf("%s: accepted bytes that are not the sealed frame: %x", mode, b)
		}
	})
}
