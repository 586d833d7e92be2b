package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// fuzzKey is the session key of FuzzLinkStream's protected links.
var fuzzKey = wireKey{1, 2, 3, 4, 5, 6, 7, 8}

// FuzzLinkStream feeds arbitrary bytes, as the peer's side of an
// established link, to a rank's reader, under wire protection none, mac
// or aead (mode % 3): every decoder on the reader's path (frame headers,
// protected records, nacks, aborts with their mismatch records, stall
// notices, goodbyes) sees them in context. A receive waiting on the link
// must end, with its message or an error, once the bytes end; nothing
// panics. The seeds are valid frames of every type, sealed under each
// mode.
func FuzzLinkStream(f *testing.F) {
	for _, b := range seedFrames() {
		f.Add(byte(0), b)
	}
	msg := pattern(100, 3)
	f.Add(byte(0), append(func() []byte {
		b := make([]byte, headerLen)
		encodeHeader(b, &frame{typ: typeData, h: hdr(0, 0), length: int64(len(msg))})
		return b
	}(), msg...))
	for i, mode := range []WireProtection{WireMAC, WireAEAD} {
		d, err := newWireDir(mode, fuzzKey, 1, 0, 1)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i+1), sealFrame(d, hdr(0, 0), msg))
	}
	f.Fuzz(func(t *testing.T, mode byte, b []byte) {
		var c *Conn
		var raw net.Conn
		switch mode % 3 {
		case 0:
			c, raw = rawPeer(t, 1<<20)
		case 1:
			c, raw, _ = protectedPeer(t, WireMAC, fuzzKey)
		default:
			c, raw, _ = protectedPeer(t, WireAEAD, fuzzKey)
		}
		errc := make(chan error, 1)
		sink := &bufSink{dst: make([]byte, len(msg))}
		go func() { errc <- c.Recv(context.Background(), 1, hdr(0, 0), len(msg), sink) }()
		_, _ = raw.Write(b)
		_ = raw.(*net.TCPConn).CloseWrite()
		select {
		case err := <-errc:
			if err == nil && !bytes.Equal(sink.dst, msg) && !bytes.Contains(b, sink.dst) {
				t.Fatalf("received %x, which the peer never sent", sink.dst)
			}
			if err != nil && !isPeerOrWire(err) {
				t.Fatalf("error %v is neither a PeerError, a mismatch nor a wire protection failure", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the receive did not end after the peer's bytes did")
		}
	})
}

// isPeerOrWire reports whether err blames the peer, the link's bytes, or
// a mismatch of the collective the peer's header describes.
func isPeerOrWire(err error) bool {
	var pe *transport.PeerError
	var me *transport.MismatchError
	return errors.As(err, &pe) || errors.As(err, &me) || errors.Is(err, ErrWireAuth)
}
