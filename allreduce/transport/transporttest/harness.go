package transporttest

// The suite's tools: payloads and headers, a recording Sink, and waiting for
// calls that may hang within the suite's bound.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// header is a distinctive header for message step of a test.
func header(step int) transport.Header {
	return transport.Header{Group: 7, Seq: 3, Kind: 1, DType: 2, Op: 1, Root: -1, Count: 12345, Step: uint32(step)}
}

// payload is n deterministic bytes, different for every (seed, n).
// It is ChaCha8's stream (filled in bulk, not byte by byte: the race
// detector made the suite's megabyte payloads seconds each).
func payload(seed uint64, n int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(n))
	p := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(p)
	return p
}

// recorder is a Sink that checks the piece protocol and keeps a copy of the
// bytes.
type recorder struct {
	mu     sync.Mutex
	got    []byte
	pieces []int
	errs   []string
}

func (r *recorder) Consume(off int, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off != len(r.got) {
		r.errs = append(r.errs, fmt.Sprintf("piece %d at offset %d, want %d (pieces must be consecutive)", len(r.pieces), off, len(r.got)))
	}
	r.got = append(r.got, p...)
	r.pieces = append(r.pieces, len(p))
}

// check verifies the message delivered into r was want.
func (r *recorder) check(want []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		return errors.New(strings.Join(r.errs, "; "))
	}
	for i, n := range r.pieces {
		if i < len(r.pieces)-1 && n%8 != 0 {
			return fmt.Errorf("piece %d of %d is %d bytes: every piece but the last must be a multiple of 8", i, len(r.pieces), n)
		}
	}
	if len(r.got) != len(want) {
		return fmt.Errorf("received %d bytes in %d pieces, want %d", len(r.got), len(r.pieces), len(want))
	}
	if !bytes.Equal(r.got, want) {
		for i := range want {
			if r.got[i] != want[i] {
				return fmt.Errorf("payload of %d bytes differs first at byte %d", len(want), i)
			}
		}
	}
	return nil
}

func (r *recorder) called() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pieces) > 0 && len(r.got) > 0
}

// goRun runs fn on its own goroutine and returns a channel with its error.
func goRun(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// errHung is what await returns for a call that did not return in time.
var errHung = errors.New("transporttest: call still blocked")

// await waits for the result of a goRun; a call that takes longer than d is
// reported as an error wrapping errHung (the endpoints are closed when the
// subtest ends, which should release it). It may be called from any
// goroutine.
func await(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		return fmt.Errorf("%s: %w after %v", what, errHung, d)
	}
}

func boundCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

var sizes = []int{0, 1, 8, 4096 + 3, 1 << 20}

// transfer sends msgs from rank a to rank b, concurrently with b receiving
// them, and checks every delivery.
func transfer(t *testing.T, ctx context.Context, conns []transport.Conn, a, b int, msgs [][]byte) {
	t.Helper()
	sent := goRun(func() error {
		for i, p := range msgs {
			if err := conns[a].Send(ctx, b, header(i), p); err != nil {
				return fmt.Errorf("Send #%d (%d bytes) %d→%d: %w", i, len(p), a, b, err)
			}
		}
		return nil
	})
	recvd := goRun(func() error {
		for i, p := range msgs {
			var rec recorder
			if err := conns[b].Recv(ctx, a, header(i), len(p), &rec); err != nil {
				return fmt.Errorf("Recv #%d (%d bytes) %d→%d: %w", i, len(p), a, b, err)
			}
			if err := rec.check(p); err != nil {
				return fmt.Errorf("message #%d %d→%d: %w", i, a, b, err)
			}
		}
		return nil
	})
	if err := await(t, sent, bound, "Send"); err != nil {
		t.Error(err)
	}
	if err := await(t, recvd, bound, "Recv"); err != nil {
		t.Error(err)
	}
}

// placeSink is a transport.Placer over dst; a transport may place the
// payload there itself or hand it to Consume.
type placeSink struct{ dst []byte }

func (p *placeSink) Place(n int) []byte { return p.dst[:n] }

func (p *placeSink) Consume(off int, b []byte) { copy(p.dst[off:], b) }

func slicesReverse(m [][]byte) {
	for i, j := 0, len(m)-1; i < j; i, j = i+1, j-1 {
		m[i], m[j] = m[j], m[i]
	}
}

// senderSawError reports whether the sender of a mismatched message learned
// of it: from Send itself or, for transports whose Send returns before the
// receiver looks, from its next call.
func senderSawError(ctx context.Context, c transport.Conn, peer int, sendErr error) error {
	if sendErr != nil {
		return sendErr
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Recv(ctx, peer, header(99), 0, &recorder{})
}
