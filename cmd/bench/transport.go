package main

import (
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// openTransport returns this process's endpoints of a world of ranks ranks:
// every rank for in-process transports, this process's rank(s) for
// multi-process ones (the world size then comes from the launcher and must
// agree with ranks). The benchmark drives each endpoint on its own goroutine
// and works out everything else (which rank prints, the slowest rank's time,
// the wrong-element total) with collectives, so it runs unchanged on any
// transport.
type openTransport func(ranks int, timeout time.Duration) ([]transport.Conn, error)

// transports are the -transport values. A new transport (tcp) is one entry.
var transports = map[string]openTransport{
	"inproc": func(ranks int, timeout time.Duration) ([]transport.Conn, error) {
		conns, _, err := allreducetest.InprocConns(ranks, timeout)
		return conns, err
	},
}
