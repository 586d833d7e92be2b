package tcp_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

// TestConformance runs the transport conformance suite over loopback TCP
// ranks in this process, with link readers that poll for small messages
// (the default) and with readers that always park in the network poller.
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"poll", 0}, {"park", -1}, {"poll-long", time.Minute}} {
		t.Run(mode.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
				return allreducetest.Conns(tcpConnsWith(t, n, 5*time.Second, func(c *tcp.Config) { c.Spin = mode.spin }))
			})
		})
	}
}
