package main

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// connectFunc returns this process's endpoints of a world of ranks ranks
// (every rank for in-process transports; a multi-process transport would
// return this process's rank(s), the world size coming from the launcher).
type connectFunc func(ctx context.Context, ranks int) ([]transport.Conn, error)

// commTimeout is how long a rank waits for a peer without progress.
const commTimeout = 60 * time.Second

// transports are the -transport values; adding tcp is one entry here.
var transports = map[string]connectFunc{
	"inproc": func(_ context.Context, ranks int) ([]transport.Conn, error) {
		w, err := inproc.NewWorld(ranks, inproc.WithTimeout(commTimeout))
		if err != nil {
			return nil, err
		}
		conns := make([]transport.Conn, ranks)
		for r := range conns {
			conns[r] = w.Conn(r)
		}
		return conns, nil
	},
}

func transportNames() string {
	names := make([]string, 0, len(transports))
	for k := range transports {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
