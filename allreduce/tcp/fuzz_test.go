package tcp

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// seedFrames are valid frames of every type, for the fuzz corpus.
func seedFrames() [][]byte {
	var out [][]byte
	for _, f := range []frame{
		{typ: typeData, h: transport.Header{Group: 1, Seq: 2, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 1000, Step: 3}, length: 4000},
		{typ: typeData, h: transport.Header{Root: 2, Count: -1}, length: 0},
		{typ: typeNack, h: transport.Header{Seq: 9}, length: nackLen},
		{typ: typeAbort, flags: flagMismatch, length: 17},
		{typ: typeGoodbye},
		{typ: typeStall, h: transport.Header{Seq: 4, Kind: 1, Count: 10}, length: stallLen},
	} {
		b := make([]byte, headerLen)
		encodeHeader(b, &f)
		out = append(out, b)
	}
	return out
}

func FuzzDecodeHeader(f *testing.F) {
	for _, b := range seedFrames() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, headerLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		if err := decodeHeader(b, &fr); err != nil {
			return
		}
		if fr.length < 0 || fr.length > maxPayload {
			t.Fatalf("accepted length %d", fr.length)
		}
		switch fr.typ {
		case typeNack:
			if fr.length != nackLen {
				t.Fatalf("nack of %d bytes", fr.length)
			}
		case typeAbort:
			if fr.length > maxCauseLen {
				t.Fatalf("abort of %d bytes", fr.length)
			}
		}
		// What decodes re-encodes to the same bytes.
		out := make([]byte, headerLen)
		encodeHeader(out, &fr)
		if !bytes.Equal(out, b[:headerLen]) {
			t.Fatalf("round trip:\n in %x\nout %x", b[:headerLen], out)
		}
	})
}

// FuzzDecodeStall: no stall payload panics the decoder, and what it
// accepts passes the notice's checks and encodes back to the same bytes.
func FuzzDecodeStall(f *testing.F) {
	var b [stallLen]byte
	encodeStall(b[:], &transport.Stall{Rank: 1, Peer: 2, What: "recv", After: time.Second})
	f.Add(b[:], 1, 4)
	f.Add(make([]byte, stallLen), 0, 1)
	f.Fuzz(func(t *testing.T, b []byte, peer, size int) {
		if size < 1 || size > 1<<20 || peer < 0 || peer >= size {
			return
		}
		s, err := decodeStall(peer, size, transport.Header{}, b)
		if err != nil {
			return
		}
		if err := s.Check(peer, size); err != nil {
			t.Fatalf("accepted %+v: %v", s, err)
		}
		var out [stallLen]byte
		encodeStall(out[:], &s)
		if !bytes.Equal(out[:], b) {
			t.Fatalf("round trip:\n in %x\nout %x", b, out)
		}
	})
}

// fakeConn is a net.Conn reading from a byte slice and recording writes.
type fakeConn struct {
	r io.Reader
	w bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzAcceptHandshake feeds arbitrary bytes to a listening rank's side of
// the handshake: it must not panic, must never admit a dialer that cannot
// know the secret, and must never send anything computed with the secret:
// what it writes is the same whatever the secret (the nonces are fixed).
func FuzzAcceptHandshake(f *testing.F) {
	hello := make([]byte, helloFixed, helloFixed+4)
	putPrefix(hello, hsHello, modeHMAC)
	binary.BigEndian.PutUint32(hello[8:], 3)
	binary.BigEndian.PutUint32(hello[12:], 2)
	hello[helloFixed-1] = 4
	hello = append(hello, "test"...)
	proof := make([]byte, proofLen)
	putPrefix(proof, hsProof, modeHMAC)
	old := append([]byte{}, hello...)
	binary.BigEndian.PutUint16(old[4:], 2)
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), proof...))
	f.Add(old)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var sent [2][]byte
		for i, secret := range [][]byte{testSecret, []byte("another secret for the fuzzer")} {
			p := &handshakeParams{secret: secret, mode: modeHMAC, size: 3, rank: 0, runID: "test", rand: zeroReader{}}
			admitted := false
			nc := &fakeConn{r: bytes.NewReader(b)}
			res, _ := acceptHandshake(nc, p, acceptHooks{
				authenticated: func() bool { admitted = true; return true },
				admit:         func(int) string { admitted = true; return "" },
				release:       func(int) {},
			})
			if res.out == acceptOK || admitted {
				t.Fatalf("admitted a dialer without the secret: %q", b)
			}
			sent[i] = nc.w.Bytes()
		}
		if !bytes.Equal(sent[0], sent[1]) {
			t.Fatalf("the listener's replies depend on its secret:\n%x\n%x", sent[0], sent[1])
		}
	})
}

// FuzzDialHandshake feeds arbitrary bytes to a dialing rank as the
// listener's replies: it must not panic, and must never accept a listener
// that cannot know the secret.
func FuzzDialHandshake(f *testing.F) {
	ch := make([]byte, challengeLen)
	putPrefix(ch, hsChallenge, modeHMAC)
	verdict := make([]byte, verdictFixed+2+macLen)
	putPrefix(verdict, hsVerdict, modeHMAC)
	binary.BigEndian.PutUint32(verdict[8:], 3)
	refusal := make([]byte, prefixLen, prefixLen+6)
	putPrefix(refusal, hsRefuse, modeHMAC)
	refusal = appendReason(refusal, "nope")
	f.Add(ch)
	f.Add(append(append([]byte{}, ch...), verdict...))
	f.Add(append(append([]byte{}, ch...), refusal...))
	f.Add(refusal)
	f.Add(bytes.Repeat([]byte{0xff}, 200))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &handshakeParams{secret: testSecret, mode: modeHMAC, size: 3, rank: 2, runID: "test"}
		s, _, err := dialHandshake(&fakeConn{r: bytes.NewReader(b)}, p, 0)
		if err == nil || s != (session{}) {
			t.Fatalf("accepted a listener without the secret: %q", b)
		}
	})
}

// zeroReader reads zeros: fixed nonces, to compare what a listener sends.
type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzDecodeHeader when
// RINGDDP_WRITE_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("RINGDDP_WRITE_SEEDS") == "" {
		t.Skip("set RINGDDP_WRITE_SEEDS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeHeader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seeds := seedFrames()
	trunc := append([]byte{}, seeds[0][:headerLen-1]...)
	huge := append([]byte{}, seeds[0]...)
	binary.BigEndian.PutUint64(huge[40:], 1<<62)
	binary.BigEndian.PutUint32(huge[52:], crcOf(huge))
	names := []string{"data", "data-empty", "nack", "abort-mismatch", "goodbye"}
	for i, b := range seeds {
		writeSeed(t, dir, names[i], b)
	}
	writeSeed(t, dir, "truncated", trunc)
	writeSeed(t, dir, "huge-length", huge)
}

func writeSeed(t *testing.T, dir, name string, b []byte) {
	content := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
