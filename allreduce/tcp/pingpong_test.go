package tcp

import (
	"context"
	"io"
	"net"
	"testing"
)

// BenchmarkPingPong: one 8-byte message each way per iteration between two
// ranks (latency), over this transport and over plain TCP.
func BenchmarkPingPong(b *testing.B) {
	b.Run("transport", func(b *testing.B) {
		conns := dialMesh(b, 2, nil)
		ctx := context.Background()
		msg := make([]byte, 8)
		sink := &bufSink{dst: make([]byte, 8)}
		psink := &bufSink{dst: make([]byte, 8)}
		iters := b.N
		done := make(chan error, 1)
		go func() {
			for i := 0; i < iters; i++ {
				if err := conns[1].Recv(ctx, 0, hdr(0, 0), 8, psink); err != nil {
					done <- err
					return
				}
				if err := conns[1].Send(ctx, 0, hdr(0, 1), msg); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < iters; i++ {
			if err := conns[0].Send(ctx, 1, hdr(0, 0), msg); err != nil {
				b.Fatal(err)
			}
			if err := conns[0].Recv(ctx, 1, hdr(0, 1), 8, sink); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("raw", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		iters := b.N
		go func() {
			buf := make([]byte, 8)
			for i := 0; i < iters; i++ {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 8)
		b.ResetTimer()
		for i := 0; i < iters; i++ {
			if _, err := a.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(a, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
