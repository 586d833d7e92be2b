package main

import (
	"context"
	"io"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/launch"
)

// The benchmark's transport is launch.Transport, the layer cmd/train shares
// (the -transport, -timeout and multi-process flags, their defaults,
// connecting and launching): resolved by parseConfig into cfg.tr. What is
// here adapts it to the names bench.go uses.
//
// The benchmark drives each endpoint on its own goroutine and works out
// everything else (which rank prints, the slowest rank's time, the
// wrong-element total) with collectives, and every process derives every
// rank's inputs from the same seed, so it runs unchanged on any transport.
// Only the process holding rank 0 prints the report.

// openTransport returns this process's endpoints of a world of cfg.ranks
// ranks: every rank in process, this process's rank over tcp.
type openTransport func(ctx context.Context, cfg *config) ([]transport.Conn, error)

// transports maps each -transport value (launch.TransportNames) to its
// openTransport; every one connects through cfg.tr.
var transports = map[string]openTransport{launch.Inproc: connectTransport, launch.TCP: connectTransport}

func connectTransport(ctx context.Context, cfg *config) ([]transport.Conn, error) {
	return cfg.tr.Connect(ctx, cfg.ranks)
}

// holdsRank0 says whether this process holds rank 0, whose process prints
// the report.
func holdsRank0(conns []transport.Conn) bool {
	for _, c := range conns {
		if c.Rank() == 0 {
			return true
		}
	}
	return false
}

// launchRanks is the launcher of a -transport tcp run: it starts this
// host's ranks as processes running cfg.rankCmd with the same command line
// and waits for them (launch.Transport.Launch). Rank 0's stdout, the
// report, comes through as it is; other output with a "[rank r] " prefix.
func launchRanks(ctx context.Context, cfg *config, stdout io.Writer) error {
	return cfg.tr.Launch(ctx, cfg.args, cfg.rankCmd, stdout)
}
