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

// suite is one run of the conformance suite; its methods are the
// subtests, by file: delivery.go, mismatch.go, lifecycle.go, peermem.go.
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
