// Package freeport picks TCP ports on the loopback interface for tests
// that must name a port before the process that binds it starts (a
// store's MASTER_PORT, a launchers' rendezvous).
//
// A port the kernel handed out for ":0" and that the test then released
// lies in the ephemeral range (32768-60999 by default on Linux), from
// which the kernel also takes the local port of every connection: a
// parallel test's connection can take it before the test binds it
// ("address already in use"; one launch test failed so in six runs).
// Loopback picks below that range, where only an explicit bind can take
// a port.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// The range Loopback picks from: below Linux's default ephemeral ports.
const (
	Low  = 20000
	Span = 12000
)

// Loopback returns a port on 127.0.0.1 that was free a moment ago, in
// [Low, Low+Span). Ports are tried from a random offset, in steps of a
// prime (every port once), so that parallel tests do not probe the same
// ones; it fails tb when none is free.
func Loopback(tb testing.TB) int {
	tb.Helper()
	start := rand.IntN(Span)
	for i := range Span {
		port := Low + (start+i*7919)%Span
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
			return port
		}
	}
	tb.Fatalf("freeport: no free port on 127.0.0.1 in %d-%d", Low, Low+Span-1)
	return 0
}
