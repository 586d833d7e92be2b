package transporttest

// Subtests of delivery: rank and size, payloads in order between every pair
// through a Sink or a Placer, and the Exchanger capability.

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

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
