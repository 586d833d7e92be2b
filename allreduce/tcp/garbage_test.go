package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestGarbageWhileMeshForms: strangers connect to a listening rank and send
// random bytes, nothing, half a handshake, oversized fields or far too many
// connections; the rank survives, and the real ranks connect and work.
func TestGarbageWhileMeshForms(t *testing.T) {
	const n = 3
	store := rendezvous.NewMemStore()
	cfgs := make([]Config, n)
	for r := range cfgs {
		cfgs[r] = testConfig(r, n, store)
	}
	conns := make([]*Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	dial := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[r], errs[r] = Dial(context.Background(), cfgs[r])
		}()
	}
	dial(0)
	dial(1)
	v, err := store.Get(context.Background(), addrKey("test", 0))
	if err != nil {
		t.Fatal(err)
	}
	addr := string(v)
	attacks := garbageAttacks()
	var attackers sync.WaitGroup
	for name, payload := range attacks {
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			defer nc.Close()
			_, _ = nc.Write(payload)
			_ = nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			var sink [4096]byte
			_, _ = nc.Read(sink[:])
		}()
	}
	// A flood beyond the handshake limit, and one that stalls mid-hello.
	var flood []net.Conn
	for i := 0; i < 2*maxPendingHandshakes; i++ {
		if nc, err := net.Dial("tcp", addr); err == nil {
			flood = append(flood, nc)
		}
	}
	stall, err := net.Dial("tcp", addr)
	if err == nil {
		_, _ = stall.Write(helloHead(3, 2, 0, 4)[:20])
		defer stall.Close()
	}
	attackers.Wait()
	time.Sleep(50 * time.Millisecond)
	for _, nc := range flood {
		nc.Close()
	}
	dial(2)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ringCheck(t, conns, 1<<20)
}

// garbageAttacks are what TestGarbageWhileMeshForms's strangers send, by
// name: random bytes, nothing, and handshakes broken in each field.
func garbageAttacks() map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	validPrefix := func(typ byte) []byte {
		b := make([]byte, prefixLen)
		putPrefix(b, typ, modeHMAC)
		return b
	}
	return map[string][]byte{
		"random":          random,
		"empty":           nil,
		"prefix only":     validPrefix(hsHello),
		"wrong type":      append(validPrefix(hsVerdict), random[:100]...),
		"huge ranks":      append(helloHead(1<<31, 1<<31, 1<<31, 255), random[:255]...),
		"truncated hello": helloHead(3, 2, 0, 200)[:30],
		"bad proof":       append(helloHead(3, 2, 0, 4), append([]byte("test"), append(validPrefix(hsProof), random[:200]...)...)...),
		"refusal 64k": append(append(helloHead(3, 2, 0, 4), "test"...),
			append(validPrefix(hsRefuse), 0xff, 0xff)...),
		"frame header": func() []byte {
			b := make([]byte, headerLen)
			encodeHeader(b, &frame{typ: typeData, length: 1 << 40})
			return b
		}(),
	}
}

// helloHead is the fixed part of a hello (HMAC mode) claiming size ranks,
// from and to, with a run name of runLen bytes to follow.
func helloHead(size, from, to uint32, runLen byte) []byte {
	b := make([]byte, helloFixed)
	putPrefix(b, hsHello, modeHMAC)
	binary.BigEndian.PutUint32(b[8:], size)
	binary.BigEndian.PutUint32(b[12:], from)
	binary.BigEndian.PutUint32(b[16:], to)
	b[helloFixed-1] = runLen
	return b
}

// ringCheck runs one ring exchange of size bytes over every rank.
func ringCheck(t *testing.T, conns []*Conn, size int) {
	t.Helper()
	n := len(conns)
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := (r + n - 1) % n
			sink := &bufSink{dst: make([]byte, size)}
			errs[r] = conns[r].Exchange(ctx, (r+1)%n, hdr(0, 0), pattern(size, byte(r)), left, hdr(0, 0), size, sink)
			if errs[r] == nil && !bytes.Equal(sink.dst, pattern(size, byte(left))) {
				errs[r] = errors.New("payload differs")
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("ring check, rank %d: %v", r, err)
		}
	}
}

// rawPeer gives a Conn of rank 0 whose link to rank 1 is a socket the test
// writes to directly, past the handshake.
func rawPeer(t *testing.T, maxMessage int64) (*Conn, net.Conn) {
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
	cfg, err := Config{Rank: 0, Size: 2, Store: rendezvous.NewMemStore(), Insecure: true, Timeout: 5 * time.Second, MaxMessage: maxMessage}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(cfg)
	l := newLink(c, 1, nc.(*net.TCPConn), session{mode: WireNone})
	c.core.Links[1] = l
	c.ready.Store(true)
	l.start()
	t.Cleanup(func() {
		c.Close()
		raw.Close()
	})
	return c, raw
}

// TestGarbageFrames: a peer past the handshake sending malformed frames
// fails the link with a PeerError; nothing panics or allocates the sizes
// the frames claim.
func TestGarbageFrames(t *testing.T) {
	enc := func(f frame) []byte {
		b := make([]byte, headerLen)
		encodeHeader(b, &f)
		return b
	}
	badCRC := enc(frame{typ: typeData, h: hdr(0, 0), length: 8})
	badCRC[20] ^= 1
	badAbort := enc(frame{typ: typeAbort, length: 10})
	binary.BigEndian.PutUint64(badAbort[40:], 1<<30)
	binary.BigEndian.PutUint32(badAbort[52:], crcOf(badAbort))
	nack := enc(frame{typ: typeNack, h: hdr(0, 0), length: nackLen})
	for _, tc := range []struct {
		name   string
		bytes  []byte
		recvN  int // the receiver's expected length
		expect string
	}{
		{"random", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100), 8, "protocol error"},
		{"bad checksum", badCRC, 8, "protocol error"},
		{"over MaxMessage", enc(frame{typ: typeData, h: hdr(0, 0), length: 1<<30 + 1}), 8, "protocol error"},
		{"claims 900 MiB, sends 10 bytes", append(enc(frame{typ: typeData, h: hdr(0, 0), length: 900 << 20}), make([]byte, 10)...), 900 << 20, "connection lost"},
		{"truncated header", enc(frame{typ: typeData, h: hdr(0, 0), length: 8})[:30], 8, "connection lost"},
		{"oversized abort", badAbort, 8, "protocol error"},
		{"nack with garbage inside", append(nack, make([]byte, nackLen)...), 8, "protocol error"},
		{"stall notice naming rank 7 of 2", append(enc(frame{typ: typeStall, h: hdr(0, 0), length: stallLen}),
			0, 0, 0, 7, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), 8, "protocol error in stall notice"},
		{"stall notice of unknown kind", append(enc(frame{typ: typeStall, h: hdr(0, 0), length: stallLen}),
			0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), 8, "protocol error in stall notice"},
		{"stall frame of 17 bytes", append(enc(frame{typ: typeStall, h: hdr(0, 0), length: 17}), make([]byte, 17)...), 8, "protocol error"},
		{"unknown type", func() []byte {
			b := enc(frame{typ: typeData, h: hdr(0, 0)})
			b[4] = 99
			binary.BigEndian.PutUint32(b[52:], crcOf(b))
			return b
		}(), 8, "protocol error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, raw := rawPeer(t, 1<<30)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			errc := make(chan error, 1)
			go func() {
				errc <- c.Recv(context.Background(), 1, hdr(0, 0), tc.recvN, transport.Sink(discardSink{}))
			}()
			_, _ = raw.Write(tc.bytes)
			_ = raw.(*net.TCPConn).CloseWrite()
			var err error
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("receiver still blocked")
			}
			runtime.ReadMemStats(&after)
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), tc.expect) {
				t.Errorf("got %v, want a PeerError for rank 1 mentioning %q", err, tc.expect)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
				t.Errorf("allocated %d bytes", grew)
			}
		})
	}
}

type discardSink struct{}

func (discardSink) Consume(int, []byte) {}

func crcOf(b []byte) uint32 { return crc32.Checksum(b[:52], castagnoli) }
