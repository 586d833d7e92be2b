package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestLoopback: the port is in the range and can be bound; a port taken
// meanwhile is not returned again while held.
func TestLoopback(t *testing.T) {
	held := map[int]net.Listener{}
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for range 20 {
		p := Loopback(t)
		if p < Low || p >= Low+Span {
			t.Fatalf("port %d outside %d-%d", p, Low, Low+Span-1)
		}
		if _, dup := held[p]; dup {
			t.Fatalf("port %d returned while bound", p)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		held[p] = ln
	}
}
