package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// placeSink is a transport.Placer; it counts Consume calls, which the TCP
// transport should not make for it.
type placeSink struct {
	dst      []byte
	consumed atomic.Int32
}

func (s *placeSink) Place(n int) []byte { return s.dst[:n] }
func (s *placeSink) Consume(off int, p []byte) {
	s.consumed.Add(1)
	copy(s.dst[off:], p)
}

// A Placer's destination receives the payload straight from the socket,
// at every size, without Consume.
func TestPlacedReceive(t *testing.T) {
	conns := dialMesh(t, 2, nil)
	ctx, cancel := ctxT(30 * time.Second)
	defer cancel()
	sizes := []int{1, 7, 8, smallFrame + 1, pieceSize - 1, pieceSize, pieceSize + 1, 3*pieceSize + 5, 3<<20 + 3}
	for i, n := range sizes {
		src := pattern(n, byte(i))
		h := hdr(uint64(i), 0)
		errc := make(chan error, 1)
		go func() { errc <- conns[0].Send(ctx, 1, h, src) }()
		sink := &placeSink{dst: bytes.Repeat([]byte{0xee}, n+16)}
		if err := conns[1].Recv(ctx, 0, h, n, sink); err != nil {
			t.Fatalf("size %d: Recv: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("size %d: Send: %v", n, err)
		}
		if !bytes.Equal(sink.dst[:n], src) {
			t.Fatalf("size %d: payload differs", n)
		}
		if !bytes.Equal(sink.dst[n:], bytes.Repeat([]byte{0xee}, 16)) {
			t.Fatalf("size %d: bytes past the destination were written", n)
		}
		if c := sink.consumed.Load(); c != 0 {
			t.Fatalf("size %d: Consume called %d times for a Placer", n, c)
		}
	}
}

// A receive that gives up takes its destination back: whatever the peer
// sends afterwards never lands there, and a read into it that is under
// way (a piece half sent) does not hold the receive up.
func TestPlacedReceiveGivesUp(t *testing.T) {
	const n = 3 * pieceSize
	for _, tc := range []struct {
		name string
		sent int // payload bytes the peer sends before the receive gives up
		stop func(cancel context.CancelFunc)
	}{
		{"cancel between pieces", pieceSize, func(cancel context.CancelFunc) { cancel() }},
		{"cancel mid-piece", pieceSize + 100, func(cancel context.CancelFunc) { cancel() }},
		{"timeout mid-piece", pieceSize + 100, func(context.CancelFunc) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, raw := rawPeer(t, 1<<30)
			c.cfg.Timeout = 300 * time.Millisecond
			sink := &placeSink{dst: make([]byte, n)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.Recv(ctx, 1, hdr(0, 0), n, sink) }()
			head := make([]byte, headerLen)
			encodeHeader(head, &frame{typ: typeData, h: hdr(0, 0), length: n})
			payload := bytes.Repeat([]byte{0x5a}, n)
			if _, err := raw.Write(append(head, payload[:tc.sent]...)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			tc.stop(cancel)
			var err error
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("receive still blocked")
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("receive took %v to give up", el)
			}
			var te *transport.TimeoutError
			if !errors.Is(err, context.Canceled) && !errors.As(err, &te) {
				t.Fatalf("got %v, want a cancellation or a timeout", err)
			}
			snapshot := bytes.Clone(sink.dst)
			_, _ = raw.Write(payload[tc.sent:])
			_ = raw.(*net.TCPConn).CloseWrite()
			time.Sleep(100 * time.Millisecond)
			if !bytes.Equal(sink.dst, snapshot) {
				t.Fatal("the destination changed after the receive returned")
			}
			if !bytes.Equal(sink.dst[:pieceSize], payload[:pieceSize]) {
				t.Fatal("the first piece did not arrive")
			}
		})
	}
}
