package transporthelp

import (
	"io"
	"net"
	"testing"
)

// FakePeer listens on loopback and answers the first connection with
// reply, then reads until the other side hangs up: a peer of another
// protocol or version, as a handshake test needs one. It returns the
// address; the listener closes at tb's cleanup.
func FakePeer(tb testing.TB, reply []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(reply)
		_, _ = io.Copy(io.Discard, c)
	}()
	return ln.Addr().String()
}
