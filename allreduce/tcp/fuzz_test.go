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

// fakeConn is a net.Conn reading from a byte slice and discarding writes.
type fakeConn struct{ r io.Reader }

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzAcceptHandshake feeds arbitrary bytes to a listening rank's side of
// the handshake: it must not panic, and must never admit a dialer that
// cannot know the secret.
func FuzzAcceptHandshake(f *testing.F) {
	hello := make([]byte, helloFixed, helloFixed+4)
	putPrefix(hello, hsHello, modeHMAC)
	binary.BigEndian.PutUint32(hello[8:], 3)
	binary.BigEndian.PutUint32(hello[12:], 2)
	hello[helloFixed-1] = 4
	hello = append(hello, "test"...)
	proof := make([]byte, prefixLen+3+macLen)
	putPrefix(proof, hsProof, modeHMAC)
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), proof...))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &handshakeParams{secret: testSecret, mode: modeHMAC, size: 3, rank: 0, runID: "test"}
		admitted := false
		_, out, _ := acceptHandshake(&fakeConn{r: bytes.NewReader(b)}, p,
			func(int) string { admitted = true; return "" }, func(int) {})
		if out == acceptOK || admitted {
			t.Fatalf("admitted a dialer without the secret: %q", b)
		}
	})
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
