package rendezvous

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"testing"
	"time"
)

// seedRequests are valid requests of every op, for the fuzz corpora.
func seedRequests() [][]byte {
	return [][]byte{
		rawRequest(opSet, "rank0/addr", []byte("127.0.0.1:29500"), 0),
		rawRequest(opGet, "rank0/addr", nil, 1500*time.Millisecond),
		rawRequest(opAdd, "joined", binary.BigEndian.AppendUint64(nil, 1), 0),
		rawRequest(opGet, "never", nil, 20*time.Millisecond),
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, b := range seedRequests() {
		f.Add(b[:reqHeaderLen])
	}
	f.Add([]byte{})
	f.Add(reqHeader(opSet, 4, math.MaxUint32, 0))
	f.Add(reqHeader(opGet, 4, 0, math.MaxUint32))
	f.Add(bytes.Repeat([]byte{0xff}, reqHeaderLen))
	const maxValue = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b, maxValue)
		if err != nil {
			re, ok := err.(*requestError)
			if !ok || (re.status != stError && re.status != stLimit) || len(re.msg) > maxErrorText {
				t.Fatalf("refusal %#v", err)
			}
			return
		}
		switch {
		case r.op < opSet || r.op > opAdd:
			t.Fatalf("accepted op %d", r.op)
		case r.keyLen < 1 || r.keyLen > MaxKeyLen:
			t.Fatalf("accepted a key of %d bytes", r.keyLen)
		case r.valLen < 0 || r.valLen > maxValue:
			t.Fatalf("accepted a value of %d bytes", r.valLen)
		case r.op == opGet && r.valLen != 0, r.op == opAdd && r.valLen != 8:
			t.Fatalf("accepted op %d with a %d-byte value", r.op, r.valLen)
		case r.wait < 0 || (r.op != opGet && r.wait != 0):
			t.Fatalf("accepted op %d waiting %v", r.op, r.wait)
		}
		// What decodes re-encodes to the same bytes.
		out := make([]byte, reqHeaderLen)
		encodeRequest(out, r)
		if !bytes.Equal(out, b[:reqHeaderLen]) {
			t.Fatalf("round trip:\n in %x\nout %x", b[:reqHeaderLen], out)
		}
	})
}

// FuzzStoreRequests feeds arbitrary bytes to an authenticated connection
// of a server with small limits: it must not panic or hang, must answer
// only well-formed replies, and must leave its limits kept and nothing in
// flight.
func FuzzStoreRequests(f *testing.F) {
	seeds := seedRequests()
	f.Add(bytes.Join(seeds, nil))
	for _, b := range seeds {
		f.Add(b)
	}
	f.Add(append(rawRequest(opSet, "k", make([]byte, 64), 0), rawRequest(opGet, "k", nil, 0)...))
	f.Add(reqHeader(opSet, 4, 1000, 0)) // stalls mid-body
	f.Add(bytes.Repeat(rawRequest(opAdd, "n", make([]byte, 8), 0), 20))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _ := fuzzServe(t, b, nil)
		cfg := s.cfg
		st := s.Stats()
		if st.InFlightBytes != 0 || st.Keys > cfg.MaxKeys || st.StoredBytes > cfg.MaxStoredBytes {
			t.Fatalf("after the connection: %+v", st)
		}
	})
}

// fuzzServe serves b, as one client's bytes, on a connection of a server
// with small limits, sealed under key (nil: insecure), until the server
// ends the connection, and returns the server and how many replies it
// sent. It fails t on a hang or a malformed reply (a bad tag, an unknown
// status, an oversized body).
func fuzzServe(t *testing.T, b []byte, key *[32]byte) (*StoreServer, int) {
	cfg := StoreConfig{Insecure: key == nil, Secret: testSecret, Timeout: 50 * time.Millisecond, MaxValueLen: 64,
		MaxInFlightBytes: 4 * (64 + MaxKeyLen), MaxKeys: 8, MaxStoredBytes: 512}
	if key == nil {
		cfg.Secret = nil
	}
	cfg = cfg.withDefaults()
	mode, _ := authMode(cfg.Secret, cfg.Insecure)
	s := newStoreServer(nil, cfg, mode)
	t.Cleanup(func() { s.mem.Close() })
	srvSide, cli := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, _ := newStoreLink(srvSide, key, false)
		s.serveRequests(l)
		srvSide.Close()
	}()
	replies := make(chan int, 1)
	cl, _ := newStoreLink(cli, key, true)
	go func() {
		n := 0
		for {
			st, body, err := readReply(&rawConn{storeLink: cl})
			if err != nil {
				if errors.Is(err, ErrFrameAuth) {
					n = -1
				}
				replies <- n
				return
			}
			if st > stLimit || len(body) > max(cfg.MaxValueLen, maxErrorText) {
				replies <- -1
				return
			}
			n++
		}
	}()
	cli.Write(b)
	cli.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("server still serving 5 s after the client hung up")
	}
	n := <-replies
	if n < 0 {
		t.Fatal("malformed reply")
	}
	return s, n
}
