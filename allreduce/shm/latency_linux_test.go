//go:build linux

package shm_test

import (
	"context"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

type discard struct{}

func (discard) Consume(int, []byte) {}

// The small-message benchmarks of docs/shm.md ("Small messages"): go test
// -run XXX -bench '8$' -cpu 2 ./allreduce/shm/

// BenchmarkPingPong8: one 8-byte message each way between two ranks of
// this process, per iteration (a round trip).
func BenchmarkPingPong8(b *testing.B) {
	conns := shmConns(b, 2)
	ctx := context.Background()
	h := hdr(1, 0)
	p := make([]byte, 8)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if err := conns[1].Recv(ctx, 0, h, 8, discard{}); err != nil {
				done <- err
				return
			}
			if err := conns[1].Send(ctx, 0, h, p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := conns[0].Send(ctx, 1, h, p); err != nil {
			b.Fatal(err)
		}
		if err := conns[0].Recv(ctx, 1, h, 8, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExchange8: an 8-byte Exchange between two ranks, both ways at
// once, per iteration (a recursive-doubling round).
func BenchmarkExchange8(b *testing.B) {
	conns := shmConns(b, 2)
	ctx := context.Background()
	h := hdr(1, 0)
	run := func(c transport.Exchanger, peer int) error {
		p := make([]byte, 8)
		for i := 0; i < b.N; i++ {
			if err := c.Exchange(ctx, peer, h, p, peer, h, 8, discard{}); err != nil {
				return err
			}
		}
		return nil
	}
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { done <- run(conns[1], 0) }()
	if err := run(conns[0], 1); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
