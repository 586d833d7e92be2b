package tcp_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

// TestConformance runs the transport conformance suite over loopback TCP
// ranks in this process.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
		conns := tcpConns(t, n, 5*time.Second)
		out := make([]transport.Conn, n)
		for r, c := range conns {
			out[r] = c
		}
		t.Cleanup(func() {
			for _, c := range conns {
				c.Close()
			}
		})
		return out
	})
}
