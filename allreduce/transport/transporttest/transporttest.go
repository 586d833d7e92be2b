// Package transporttest is the conformance suite of transport.Conn: a
// transport's own test calls Run with a constructor of connected endpoints,
// as gonum's blas implementations call blas/testblas.
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
//			return myTransportConns(t, n) // n connected endpoints, by rank
//		})
//	}
//
// The suite checks the contract documented in package transport: rank and
// size; delivery of payloads in order between every pair through a Sink in
// consecutive pieces; header and length mismatches reported to both sides;
// the optional Exchanger, Aborter and PeerMemory capabilities when
// the endpoints have them; context cancellation and deadlines; Close.
//
// Each endpoint is used by one goroutine at a time, except Close and Abort,
// as the contract allows. The constructor is called once per subtest and
// should register any cleanup with t.Cleanup; the suite closes every
// endpoint it was given at the end of each subtest.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// bound is how long any single operation of the suite may take before it is
// reported as hung. Transports under test should have timeouts longer than
// the suite's deliberate waits (a few hundred milliseconds) and shorter than
// this.
const bound = 10 * time.Second

// Run runs the conformance suite against the endpoints newConns makes.
// newConns(t, n) must return n connected endpoints, conns[r] being rank r.
func Run(t *testing.T, newConns func(t *testing.T, n int) []transport.Conn) {
	s := &suite{newConns: newConns}
	for _, st := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"RankSize", s.rankSize},
		{"SendRecv", s.sendRecv},
		{"Placer", s.placer},
		{"SendRecvAllPairs", s.sendRecvAllPairs},
		{"ManyInOrder", s.manyInOrder},
		{"HeaderMismatch", s.headerMismatch},
		{"LengthMismatch", s.lengthMismatch},
		{"InvalidPeer", s.invalidPeer},
		{"Exchange", s.exchange},
		{"CancelRecv", s.cancelRecv},
		{"DeadlineRecv", s.deadlineRecv},
		{"Close", s.close},
		{"ClosePeerSend", s.closePeerSend},
		{"Abort", s.abort},
		{"PeerMemory", s.peerMemory},
		{"PeerMemoryMismatch", s.peerMemoryMismatch},
	} {
		t.Run(st.name, st.fn)
	}
}

type suite struct {
	newConns func(t *testing.T, n int) []transport.Conn
}

// conns makes n endpoints and closes them when the subtest ends.
func (s *suite) conns(t *testing.T, n int) []transport.Conn {
	t.Helper()
	conns := s.newConns(t, n)
	if len(conns) != n {
		t.Fatalf("newConns(%d) returned %d endpoints", n, len(conns))
	}
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return conns
}

// header is a distinctive header for message step of a test.
func header(step int) transport.Header {
	return transport.Header{Group: 7, Seq: 3, Kind: 1, DType: 2, Op: 1, Root: -1, Count: 12345, Step: uint32(step)}
}

// payload is n deterministic bytes, different for every (seed, n).
func payload(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
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

func (s *suite) rankSize(t *testing.T) {
	for n := 1; n <= 5; n++ {
		conns := s.conns(t, n)
		for r, c := range conns {
			if c.Rank() != r || c.Size() != n {
				t.Errorf("n=%d: conns[%d] reports rank %d of %d", n, r, c.Rank(), c.Size())
			}
		}
	}
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

func (p *placeSink) Place(n int) []byte        { return p.dst[:n] }
func (p *placeSink) Consume(off int, b []byte) { copy(p.dst[off:], b) }

// placer: a Placer's destination holds each payload after Recv, and the
// bytes past it are untouched, whether the transport placed the payload or
// consumed it.
func (s *suite) placer(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	const guard = 64
	for i, n := range append(sizes, 3<<20+5) {
		p := payload(uint64(i), n)
		sent := goRun(func() error { return conns[0].Send(ctx, 1, header(i), p) })
		sink := &placeSink{dst: bytes.Repeat([]byte{0xa5}, n+guard)}
		if err := conns[1].Recv(ctx, 0, header(i), n, sink); err != nil {
			t.Fatalf("Recv of %d bytes into a Placer: %v", n, err)
		}
		if err := await(t, sent, bound, "Send"); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sink.dst[:n], p) {
			t.Fatalf("%d bytes: the destination does not hold the payload", n)
		}
		if !bytes.Equal(sink.dst[n:], bytes.Repeat([]byte{0xa5}, guard)) {
			t.Fatalf("%d bytes: bytes past the destination were written", n)
		}
	}
}

// sendRecv: payloads of every size, both directions, in order.
func (s *suite) sendRecv(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	var msgs [][]byte
	for i, n := range sizes {
		msgs = append(msgs, payload(uint64(i), n))
	}
	transfer(t, ctx, conns, 0, 1, msgs)
	transfer(t, ctx, conns, 1, 0, msgs)
	slicesReverse(msgs)
	transfer(t, ctx, conns, 0, 1, msgs)
}

func slicesReverse(m [][]byte) {
	for i, j := 0, len(m)-1; i < j; i, j = i+1, j-1 {
		m[i], m[j] = m[j], m[i]
	}
}

// sendRecvAllPairs: every ordered pair of 4 ranks, one pair at a time.
func (s *suite) sendRecvAllPairs(t *testing.T) {
	const n = 4
	conns := s.conns(t, n)
	ctx := boundCtx(t)
	for a := range n {
		for b := range n {
			if a == b {
				continue
			}
			transfer(t, ctx, conns, a, b, [][]byte{payload(uint64(a*n+b), 100+a), payload(1, 0), payload(2, 4096+3)})
		}
	}
}

// manyInOrder: a long stream of messages of varying sizes on one pair, while
// another pair of the same group runs its own stream.
func (s *suite) manyInOrder(t *testing.T) {
	conns := s.conns(t, 4)
	ctx := boundCtx(t)
	var msgs [][]byte
	for i := range 200 {
		msgs = append(msgs, payload(uint64(i), (i*997)%5000))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); transfer(t, ctx, conns, 0, 1, msgs) }()
	go func() { defer wg.Done(); transfer(t, ctx, conns, 3, 2, msgs) }()
	wg.Wait()
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

func (s *suite) headerMismatch(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	sh, rh := header(0), header(0)
	rh.Kind = 4
	rh.Root = 1
	p := payload(5, 64)
	sent := goRun(func() error {
		err := conns[0].Send(ctx, 1, sh, p)
		return senderSawError(ctx, conns[0], 1, err)
	})
	var rec recorder
	err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, rh, len(p), &rec) }), bound, "Recv")
	var mm *transport.MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("receiver: got %v, want a *transport.MismatchError", err)
	}
	if !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("receiver: %v does not wrap ErrMismatch", err)
	}
	if mm.Peer != 0 || mm.Local != rh || mm.Remote != sh || mm.LocalBytes != len(p) || mm.RemoteBytes != len(p) {
		t.Errorf("receiver: %+v, want Peer 0, Local %v, Remote %v, %d bytes both", mm, rh, sh, len(p))
	}
	if rec.called() {
		t.Errorf("receiver: the sink got %d bytes of a mismatched message", len(rec.got))
	}
	serr := await(t, sent, bound, "Send")
	if !errors.Is(serr, transport.ErrMismatch) && !errors.Is(serr, transport.ErrPeer) {
		t.Errorf("sender: got %v, want an error wrapping ErrMismatch (or ErrPeer)", serr)
	}
	var smm *transport.MismatchError
	if errors.As(serr, &smm) {
		if smm.Peer != 1 || smm.Local != sh || smm.Remote != rh {
			t.Errorf("sender: %+v, want Peer 1, Local %v, Remote %v", smm, sh, rh)
		}
	}
}

func (s *suite) lengthMismatch(t *testing.T) {
	for _, c := range []struct{ sent, expected int }{{16, 8}, {8, 16}, {0, 8}, {8, 0}, {4096 + 3, 4096}} {
		t.Run(fmt.Sprintf("sent=%d/expected=%d", c.sent, c.expected), func(t *testing.T) {
			conns := s.conns(t, 2)
			ctx := boundCtx(t)
			h := header(0)
			p := payload(9, c.sent)
			sent := goRun(func() error {
				err := conns[1].Send(ctx, 0, h, p)
				return senderSawError(ctx, conns[1], 0, err)
			})
			var rec recorder
			err := await(t, goRun(func() error { return conns[0].Recv(ctx, 1, h, c.expected, &rec) }), bound, "Recv")
			var mm *transport.MismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("receiver: got %v, want a *transport.MismatchError", err)
			}
			if mm.Peer != 1 || mm.LocalBytes != c.expected || mm.RemoteBytes != c.sent {
				t.Errorf("receiver: %+v, want Peer 1, LocalBytes %d, RemoteBytes %d", mm, c.expected, c.sent)
			}
			if rec.called() {
				t.Errorf("receiver: the sink got bytes of a mismatched message")
			}
			serr := await(t, sent, bound, "Send")
			if !errors.Is(serr, transport.ErrMismatch) && !errors.Is(serr, transport.ErrPeer) {
				t.Errorf("sender: got %v, want an error wrapping ErrMismatch (or ErrPeer)", serr)
			}
		})
	}
}

func (s *suite) invalidPeer(t *testing.T) {
	conns := s.conns(t, 3)
	ctx := boundCtx(t)
	for _, peer := range []int{-1, 3, 100} {
		err := await(t, goRun(func() error { return conns[0].Send(ctx, peer, header(0), []byte{1}) }), bound, "Send")
		if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Send to rank %d of 3: got %v, want ErrInvalid", peer, err)
		}
		err = await(t, goRun(func() error { return conns[0].Recv(ctx, peer, header(0), 1, &recorder{}) }), bound, "Recv")
		if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Recv from rank %d of 3: got %v, want ErrInvalid", peer, err)
		}
	}
	// The endpoint still works afterwards.
	transfer(t, ctx, conns, 0, 2, [][]byte{payload(1, 10)})
}

// exchange: a ring of n ranks, each sending to its right and receiving from
// its left at once, for several rounds (N=1: to itself; N=2: to == from).
func (s *suite) exchange(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			conns := s.conns(t, n)
			if _, ok := conns[0].(transport.Exchanger); !ok {
				t.Skipf("%T does not implement transport.Exchanger", conns[0])
			}
			ctx := boundCtx(t)
			roundSizes := []int{13, 0, 4096 + 3, 8, 1 << 16}
			results := make([]<-chan error, n)
			for r := range n {
				ex := conns[r].(transport.Exchanger)
				right, left := (r+1)%n, (r-1+n)%n
				results[r] = goRun(func() error {
					for k, size := range roundSizes {
						p := payload(uint64(r*100+k), size)
						want := payload(uint64(left*100+k), size)
						var rec recorder
						if err := ex.Exchange(ctx, right, header(k), p, left, header(k), size, &rec); err != nil {
							return fmt.Errorf("rank %d round %d: %w", r, k, err)
						}
						if err := rec.check(want); err != nil {
							return fmt.Errorf("rank %d round %d: %w", r, k, err)
						}
					}
					return nil
				})
			}
			for r := range n {
				if err := await(t, results[r], bound, "Exchange"); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// cancelRecv: cancelling the context unblocks a Recv with no sender.
func (s *suite) cancelRecv(t *testing.T) {
	conns := s.conns(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := goRun(func() error { return conns[0].Recv(ctx, 1, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	err := await(t, res, bound, "Recv after cancel")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Recv: got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Recv returned %v after the cancel", d)
	}
}

// deadlineRecv: a context deadline ends a Recv with no sender.
func (s *suite) deadlineRecv(t *testing.T) {
	conns := s.conns(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, header(0), 8, &recorder{}) }), bound, "Recv")
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrTimeout) {
		t.Errorf("Recv: got %v, want context.DeadlineExceeded or ErrTimeout", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 3*time.Second {
		t.Errorf("Recv returned after %v, want about the 100ms deadline", d)
	}
}

// close: Close unblocks this endpoint's pending call with ErrClosed, fails
// its later calls with ErrClosed, and peers see ErrPeer for it.
func (s *suite) close(t *testing.T) {
	conns := s.conns(t, 3)
	ctx := boundCtx(t)
	pending := goRun(func() error { return conns[0].Recv(ctx, 1, header(0), 8, &recorder{}) })
	peerBlocked := goRun(func() error { return conns[2].Recv(ctx, 0, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	if err := conns[0].Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := await(t, pending, bound, "pending Recv after Close"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("pending Recv after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, peerBlocked, bound, "peer's Recv from the closed rank"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("peer's pending Recv from the closed rank: got %v, want ErrPeer", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Send(ctx, 1, header(1), []byte{1}) }), bound, "Send"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Recv(ctx, 2, header(1), 1, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv after Close: got %v, want ErrClosed", err)
	}
	if err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, header(1), 1, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("peer's later Recv from the closed rank: got %v, want ErrPeer", err)
	}
	if ex, ok := conns[0].(transport.Exchanger); ok {
		err := await(t, goRun(func() error {
			return ex.Exchange(ctx, 1, header(2), []byte{1}, 2, header(2), 1, &recorder{})
		}), bound, "Exchange")
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Exchange after Close: got %v, want ErrClosed", err)
		}
	}
	// Closing twice is harmless; the other ranks still talk to each other.
	_ = conns[0].Close()
	transfer(t, ctx, conns, 1, 2, [][]byte{payload(3, 33)})
}

// closePeerSend: a Send to a closed rank fails with ErrPeer.
func (s *suite) closePeerSend(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	if err := conns[1].Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	err := await(t, goRun(func() error {
		// A transport may buffer one small message; a second cannot go.
		if err := conns[0].Send(ctx, 1, header(0), payload(1, 64)); err != nil {
			return err
		}
		return conns[0].Send(ctx, 1, header(1), payload(2, 1<<20))
	}), bound, "Send to a closed rank")
	if !errors.Is(err, transport.ErrPeer) {
		t.Errorf("Send to a closed rank: got %v, want ErrPeer", err)
	}
}

// abort: Abort makes a peer blocked on this rank fail at once with ErrPeer
// carrying the cause.
func (s *suite) abort(t *testing.T) {
	conns := s.conns(t, 3)
	a, ok := conns[0].(transport.Aborter)
	if !ok {
		t.Skipf("%T does not implement transport.Aborter", conns[0])
	}
	ctx := boundCtx(t)
	blocked := goRun(func() error { return conns[1].Recv(ctx, 0, header(0), 8, &recorder{}) })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	a.Abort(errors.New("abort-cause-31337"))
	err := await(t, blocked, bound, "Recv from an aborted rank")
	if !errors.Is(err, transport.ErrPeer) {
		t.Errorf("blocked peer: got %v, want ErrPeer", err)
	}
	if err != nil && !strings.Contains(err.Error(), "abort-cause-31337") {
		t.Errorf("blocked peer: %q does not carry the abort cause", err)
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Peer != 0 {
		t.Errorf("blocked peer: PeerError names rank %d, want 0", pe.Peer)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("blocked peer failed %v after the abort, want at once", d)
	}
	// A peer that calls later fails too, and so does the aborted rank.
	if err := await(t, goRun(func() error { return conns[2].Recv(ctx, 0, header(0), 8, &recorder{}) }), bound, "Recv"); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("later Recv from the aborted rank: got %v, want ErrPeer", err)
	}
	if err := await(t, goRun(func() error { return conns[0].Send(ctx, 1, header(1), []byte{1}) }), bound, "Send"); err == nil {
		t.Errorf("Send on the aborted rank succeeded")
	}
}

// peerMemory: every rank exposes its buffer, sees every peer's, and the
// exposure ends cleanly, several times over.
func (s *suite) peerMemory(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			conns := s.conns(t, n)
			if _, ok := conns[0].(transport.PeerMemory); !ok {
				t.Skipf("%T does not implement transport.PeerMemory", conns[0])
			}
			ctx := boundCtx(t)
			res := make([]<-chan error, n)
			for r := range n {
				pm := conns[r].(transport.PeerMemory)
				res[r] = goRun(func() error {
					for k, size := range []int{64, 8, 4096} {
						h := header(0)
						h.Seq = uint64(k)
						p := payload(uint64(r*10+k), size)
						views, err := pm.Expose(ctx, h, p)
						if err != nil {
							return fmt.Errorf("rank %d round %d: Expose: %w", r, k, err)
						}
						if len(views) != n {
							return fmt.Errorf("rank %d: %d views, want %d", r, len(views), n)
						}
						for q, v := range views {
							if !bytes.Equal(v, payload(uint64(q*10+k), size)) {
								return fmt.Errorf("rank %d round %d: view of rank %d is not its buffer", r, k, q)
							}
						}
						if err := pm.Arrive(ctx); err != nil {
							return fmt.Errorf("rank %d round %d: Arrive: %w", r, k, err)
						}
						if err := pm.Release(ctx); err != nil {
							return fmt.Errorf("rank %d round %d: Release: %w", r, k, err)
						}
					}
					return nil
				})
			}
			for r := range n {
				if err := await(t, res[r], bound, "PeerMemory"); err != nil {
					t.Error(err)
				}
			}
			// Messages flow again after the exposures.
			if n > 1 && !t.Failed() {
				transfer(t, ctx, conns, 0, n-1, [][]byte{payload(1, 24), payload(2, 0)})
				transfer(t, ctx, conns, n-1, 0, [][]byte{payload(3, 4096)})
			}
		})
	}
}

// peerMemoryMismatch: ranks exposing under different headers both get a
// *MismatchError.
func (s *suite) peerMemoryMismatch(t *testing.T) {
	conns := s.conns(t, 2)
	if _, ok := conns[0].(transport.PeerMemory); !ok {
		t.Skipf("%T does not implement transport.PeerMemory", conns[0])
	}
	ctx := boundCtx(t)
	res := make([]<-chan error, 2)
	for r := range 2 {
		pm := conns[r].(transport.PeerMemory)
		h := header(0)
		h.Count = int64(100 + r)
		res[r] = goRun(func() error {
			_, err := pm.Expose(ctx, h, payload(1, 64))
			return err
		})
	}
	for r := range 2 {
		err := await(t, res[r], bound, "Expose")
		var mm *transport.MismatchError
		if !errors.As(err, &mm) {
			t.Errorf("rank %d: got %v, want a *transport.MismatchError", r, err)
			continue
		}
		if mm.Peer != 1-r || mm.Local.Count != int64(100+r) || mm.Remote.Count != int64(100+1-r) {
			t.Errorf("rank %d: %+v: want Peer %d, Local.Count %d, Remote.Count %d", r, mm, 1-r, 100+r, 101-r)
		}
	}
}
