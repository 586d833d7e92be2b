package tcp_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/bytesize"
)

var benchSizes = []int{4 << 10, 1 << 20, 64 << 20}

// BenchmarkTCPAllReduce times AllReduce of float32 with the default
// algorithm over 4 TCP ranks (goroutines of this process, over loopback):
// allreducetest.BenchAllReduce, the body every transport's benchmark
// shares. Its busbw = algbw·2(N-1)/N is the rate each link carries,
// comparable with BenchmarkLoopbackRaw.
func BenchmarkTCPAllReduce(b *testing.B) {
	const n = 4
	for _, bytes := range benchSizes {
		b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, bytesize.Format(bytes)), func(b *testing.B) {
			allreducetest.BenchAllReduce(b, allreducetest.Conns(tcpConns(b, n, time.Minute)), bytes/4)
		})
	}
}

// BenchmarkLoopbackRaw is the baseline: plain TCP over loopback, no
// framing. ranks=4 streams around a ring of 4 connections at once (each
// goroutine writes to the right and reads from the left, as one ring step
// does) and reports the rate per link; ranks=2 is a single stream.
func BenchmarkLoopbackRaw(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, bytes := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, bytesize.Format(bytes)), func(b *testing.B) {
				links := n
				if n == 2 {
					links = 1
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				out := make([]net.Conn, links) // out[i]: written by i
				in := make([]net.Conn, links)  // in[i]: read by i+1
				for i := range out {
					if out[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
						b.Fatal(err)
					}
					if in[i], err = ln.Accept(); err != nil {
						b.Fatal(err)
					}
					for _, c := range []net.Conn{out[i], in[i]} {
						c.(*net.TCPConn).SetReadBuffer(4 << 20)
						c.(*net.TCPConn).SetWriteBuffer(4 << 20)
						defer c.Close()
					}
				}
				iters := b.N
				b.SetBytes(int64(bytes))
				b.ResetTimer()
				var wg sync.WaitGroup
				for i := 0; i < links; i++ {
					wg.Add(2)
					go func() {
						defer wg.Done()
						buf := make([]byte, bytes)
						for it := 0; it < iters; it++ {
							if _, err := out[i].Write(buf); err != nil {
								b.Error(err)
								return
							}
						}
					}()
					go func() {
						defer wg.Done()
						buf := make([]byte, bytes)
						for it := 0; it < iters; it++ {
							if _, err := io.ReadFull(in[i], buf); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
