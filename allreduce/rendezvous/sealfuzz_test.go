package rendezvous

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/frameseal"
)

// fuzzKey is the session key of the fuzzed connections.
var fuzzKey = [frameseal.KeyLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}

// sealedRequests is reqs (whole unsealed requests) sealed as the client
// of a connection with fuzzKey sends them.
func sealedRequests(reqs ...[]byte) []byte {
	send, _ := frameseal.Open(fuzzKey, labelToServer)
	var out []byte
	for _, r := range reqs {
		out = append(out, r[:reqHeaderLen]...)
		out = append(out, send.Seal(make([]byte, frameseal.TagLen), r[:reqHeaderLen])...)
		out = append(out, r[reqHeaderLen:]...)
		out = append(out, send.Seal(make([]byte, frameseal.TagLen), r[reqHeaderLen:])...)
	}
	return out
}

// sealedReply is a reply sealed as the n-th reply (from 0) of a
// connection with fuzzKey, alone (the n before it are sealed and dropped).
func sealedReply(n int, status byte, body []byte) []byte {
	send, _ := frameseal.Open(fuzzKey, labelToClient)
	var out []byte
	for i := 0; i <= n; i++ {
		h := make([]byte, replyHeaderLen)
		encodeReply(h, status, len(body))
		out = append(h, send.Seal(make([]byte, frameseal.TagLen), h)...)
		out = append(out, body...)
		out = append(out, send.Seal(make([]byte, frameseal.TagLen), body)...)
	}
	return out
}

// validPrefix counts the whole requests at the start of b whose tags
// check and whose headers the server accepts, as an independent reading
// of the sealed framing: header, tag, body, tag, in order.
func validPrefix(b []byte, maxValue int) int {
	recv, _ := frameseal.Open(fuzzKey, labelToServer)
	n := 0
	for {
		if len(b) < reqHeaderLen+frameseal.TagLen {
			return n
		}
		h := b[:reqHeaderLen]
		if recv.Check(h, b[reqHeaderLen:reqHeaderLen+frameseal.TagLen]) != nil {
			return n
		}
		r, err := decodeRequest(h, maxValue)
		if err != nil {
			return n
		}
		b = b[reqHeaderLen+frameseal.TagLen:]
		body := r.keyLen + r.valLen
		if len(b) < body+frameseal.TagLen || recv.Check(b[:body], b[body:body+frameseal.TagLen]) != nil {
			return n
		}
		b = b[body+frameseal.TagLen:]
		n++
	}
}

// FuzzSealedRequests feeds arbitrary bytes to a sealed server connection:
// no panic and no hang; the server answers, with replies whose tags check,
// at most one request per whole valid sealed request the input starts
// with, plus at most one refusal; nothing is stored from a request that
// did not check.
func FuzzSealedRequests(f *testing.F) {
	seeds := seedRequests()
	f.Add(sealedRequests(seeds...))
	for _, r := range seeds {
		f.Add(sealedRequests(r))
	}
	f.Add(bytes.Join(seeds, nil)) // unsealed: refused at the first tag
	tampered := sealedRequests(rawRequest(opSet, "plan", []byte(`{"ranks_per_node":1}`), 0))
	tampered[len(tampered)-frameseal.TagLen-2] ^= 1
	f.Add(tampered)
	f.Add(sealedRequests(reqHeader(opSet, 4, 1000, 0))[:2*reqHeaderLen]) // stalls mid-body
	f.Fuzz(func(t *testing.T, b []byte) {
		s, n := fuzzServe(t, b, &fuzzKey)
		cfg := s.cfg
		valid := validPrefix(b, cfg.MaxValueLen)
		if n > valid+1 {
			t.Fatalf("%d replies to %d valid requests", n, valid)
		}
		if keys, _ := s.mem.usage(); keys > valid {
			t.Fatalf("%d keys stored from %d valid requests", keys, valid)
		}
		if st := s.Stats(); st.InFlightBytes != 0 {
			t.Fatalf("after the connection: %+v", st)
		}
	})
}

// FuzzStoreReplies feeds arbitrary bytes to a sealed client connection as
// the server's reply to a Get: no panic, and a value is returned only from
// a reply sealed as the connection's first.
func FuzzStoreReplies(f *testing.F) {
	f.Add(sealedReply(0, stOK, []byte(`{"ranks_per_node":1}`)))
	f.Add(sealedReply(0, stTimeout, []byte("not set")))
	f.Add(sealedReply(1, stOK, []byte("a replayed second reply")))
	f.Add(sealedReply(0, stOK, nil)[:20])
	f.Add(append(make([]byte, 4), 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		srvSide, cli := net.Pipe()
		defer cli.Close()
		go func() {
			go io.Copy(io.Discard, srvSide)
			srvSide.Write(b)
			srvSide.Close()
		}()
		l, _ := newStoreLink(cli, &fuzzKey, true)
		s := &TCPStore{cfg: StoreConfig{Secret: testSecret, MaxValueLen: 64}.withDefaults()}
		cli.SetDeadline(time.Now().Add(5 * time.Second))
		status, body, err := s.exchange(l, opGet, "k", nil, 0)
		if err != nil {
			return
		}
		if want := sealedReply(0, status, body); !bytes.HasPrefix(b, want) {
			t.Fatalf("accepted status %d body %q from %x, which is not a sealed first reply", status, body, b)
		}
	})
}

// FuzzDecodeReply checks the reply header decoder's bounds: a body longer
// than the client's limit (or a refusal longer than maxErrorText) and an
// unknown status are refused before anything is allocated.
func FuzzDecodeReply(f *testing.F) {
	for _, st := range []byte{stOK, stTimeout, stError, stNotCounter, stLimit, 99} {
		h := make([]byte, replyHeaderLen)
		encodeReply(h, st, 40)
		f.Add(h)
	}
	f.Add(bytes.Repeat([]byte{0xff}, replyHeaderLen))
	const maxValue = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < replyHeaderLen {
			return
		}
		status, n, err := decodeReply(b, maxValue)
		if err != nil {
			return
		}
		size := binary.BigEndian.Uint32(b[4:])
		switch {
		case status > stLimit:
			t.Fatalf("accepted status %d", status)
		case n != int(size) || n > maxValue || (status != stOK && n > maxErrorText):
			t.Fatalf("accepted status %d with %d bytes (header says %d)", status, n, size)
		}
	})
}

// TestSealedFraming: the framing as this file's reference writes it is
// what the client and the server read: the seeds of the fuzz targets
// above are accepted whole, so the targets reach past the tags.
func TestSealedFraming(t *testing.T) {
	seeds := seedRequests()
	if n := validPrefix(sealedRequests(seeds...), 64); n != len(seeds) {
		t.Fatalf("reference reads %d of %d sealed requests", n, len(seeds))
	}
	srvSide, cli := net.Pipe()
	defer cli.Close()
	go func() {
		go io.Copy(io.Discard, srvSide)
		srvSide.Write(sealedReply(0, stOK, []byte("v")))
	}()
	l, _ := newStoreLink(cli, &fuzzKey, true)
	s := &TCPStore{cfg: StoreConfig{Secret: testSecret}.withDefaults()}
	if st, body, err := s.exchange(l, opGet, "k", nil, 0); err != nil || st != stOK || string(body) != "v" {
		t.Fatalf("client reads %d %q %v", st, body, err)
	}
	cfg := StoreConfig{Secret: testSecret, Timeout: 50 * time.Millisecond}.withDefaults()
	srv := newStoreServer(nil, cfg, modeHMAC)
	defer srv.mem.Close()
	a, b := net.Pipe()
	go func() {
		l, _ := newStoreLink(a, &fuzzKey, false)
		srv.serveRequests(l)
		a.Close()
	}()
	go b.Write(sealedRequests(rawRequest(opSet, "k", []byte("v"), 0)))
	cl, _ := newStoreLink(b, &fuzzKey, true)
	if st, body, err := readReply(&rawConn{storeLink: cl}); err != nil || st != stOK || len(body) != 0 {
		t.Fatalf("server answers %d %q %v", st, body, err)
	}
	b.Close()
	if v, err := srv.mem.Get(context.Background(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("stored %q, %v", v, err)
	}
}
