package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	ca, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca.(*net.TCPConn), cb.(*net.TCPConn)
}

type readResult struct {
	b   []byte
	err error
}

func readAsync(r io.Reader, n int) chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		ch <- readResult{b, err}
	}()
	return ch
}

// A receive that begins while the reader is parked in the network poller
// kicks it into polling; the kick never shows as an error, and the data
// that follows arrives intact.
func TestPollerKickIsInvisible(t *testing.T) {
	for _, spin := range []time.Duration{time.Millisecond, time.Minute} {
		a, b := tcpPair(t)
		p := newPoller(b, spin)
		res := readAsync(&sockReader{p}, 5)
		for i := 0; i < 50; i++ { // kicks while parked and while polling
			p.expect(5)
			if i%10 == 0 {
				p.done()
			}
			time.Sleep(100 * time.Microsecond)
		}
		if _, err := a.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if r.err != nil || string(r.b) != "hello" {
				t.Fatalf("spin %v: read %q, %v; want hello, nil", spin, r.b, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("spin %v: read did not return", spin)
		}
		p.done()
	}
}

// A read deadline the link sets still applies, whether the reader polls
// or parks, and survives kicks.
func TestPollerDeadlineApplies(t *testing.T) {
	for _, polling := range []bool{false, true} {
		_, b := tcpPair(t)
		p := newPoller(b, 50*time.Millisecond)
		if polling {
			p.expect(8)
		}
		p.setReadDeadline(time.Now().Add(100 * time.Millisecond))
		start := time.Now()
		res := readAsync(&sockReader{p}, 1)
		time.Sleep(20 * time.Millisecond)
		p.expect(8) // a kick in between
		select {
		case r := <-res:
			if !errors.Is(r.err, os.ErrDeadlineExceeded) {
				t.Fatalf("polling %v: err %v, want a deadline error", polling, r.err)
			}
			if el := time.Since(start); el < 90*time.Millisecond {
				t.Fatalf("polling %v: deadline error after %v, before the deadline", polling, el)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("polling %v: the deadline did not end the read", polling)
		}
	}
}

// End of stream and a reset surface as from a plain read, polling or not.
func TestPollerEOFAndReset(t *testing.T) {
	for _, polling := range []bool{false, true} {
		a, b := tcpPair(t)
		p := newPoller(b, time.Minute)
		if polling {
			p.expect(1)
		}
		res := readAsync(&sockReader{p}, 1)
		time.Sleep(5 * time.Millisecond)
		_ = a.CloseWrite()
		if r := <-res; r.err != io.EOF {
			t.Fatalf("polling %v: err %v after the peer's close, want EOF", polling, r.err)
		}

		a, b = tcpPair(t)
		p = newPoller(b, time.Minute)
		if polling {
			p.expect(1)
		}
		res = readAsync(&sockReader{p}, 1)
		time.Sleep(5 * time.Millisecond)
		_ = a.SetLinger(0)
		_ = a.Close()
		r := <-res
		var op *net.OpError
		if r.err == nil || r.err == io.EOF || !errors.As(r.err, &op) {
			t.Fatalf("polling %v: err %v after a reset, want a *net.OpError", polling, r.err)
		}
	}
}

// Receives larger than spinMaxBytes, and a poller with no budget, never poll.
func TestPollerOnlyForSmallReceives(t *testing.T) {
	_, b := tcpPair(t)
	p := newPoller(b, time.Minute)
	p.expect(spinMaxBytes + 1)
	if p.hot() {
		t.Fatal("a large receive made the link poll")
	}
	p.expect(spinMaxBytes)
	if !p.hot() {
		t.Fatal("a small receive did not make the link poll")
	}
	p.done()
	if p.hot() {
		t.Fatal("still polling after done")
	}
	off := newPoller(b, -1)
	off.expect(8)
	if off.hot() {
		t.Fatal("a poller with a negative budget polls")
	}
}
