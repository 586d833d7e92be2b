// Command tcp_two_terminals all-reduces a small vector between two
// processes over TCP: the smallest multi-process ringddp program. It uses
// only ringddp's public packages (allreduce, allreduce/rendezvous,
// allreduce/tcp), so it can be copied out of this module as it is.
//
// In two terminals on one host (the same secret in both; rank 0 hosts the
// rendezvous store at MASTER_ADDR:MASTER_PORT):
//
//	export RINGDDP_SECRET=$(openssl rand -hex 32)   # then copy it to the other terminal
//	RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 go run ./examples/tcp_two_terminals
//	RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 go run ./examples/tcp_two_terminals
//
// Each prints what it sent and the sum it got back: [3 30 300] on both.
// On two hosts, give MASTER_ADDR the first host's address. Without RANK in
// the environment the program starts itself twice, as above, with a fresh
// secret and a free port, and passes both ranks' output through:
//
//	go run ./examples/tcp_two_terminals
//
// Start only one, and it waits for the other up to -connect-timeout,
// saying every 15 s what it waits for (rank 1: why rank 0's store does not
// answer), then fails naming the rank that never came. Rank 0 prints every
// connection its store turns away as it happens; a rank given another
// secret fails at once, and rank 0 10 s after it tried.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

func main() {
	connectTimeout := flag.Duration("connect-timeout", time.Minute, "how long to wait for the other rank")
	flag.Parse()
	ctx := context.Background()
	env, err := rendezvous.FromEnv(os.Getenv) // RANK, WORLD_SIZE, MASTER_ADDR, ... (or mpirun's, srun's)
	// The secret is in env now: what this program starts does not need it.
	os.Unsetenv("RINGDDP_SECRET")
	switch {
	case err != nil:
	case env.Found:
		err = run(ctx, env, wait{timeout: *connectTimeout, every: 15 * time.Second, grace: 10 * time.Second, errOut: os.Stderr}, os.Stdout)
	default:
		err = startBoth(ctx, "", os.Args[1:], nil, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp_two_terminals:", err)
		os.Exit(1)
	}
}

// run is one rank: connect (waiting for the other as w says), all-reduce,
// print.
func run(ctx context.Context, env rendezvous.Env, w wait, out io.Writer) error {
	// The store is where the ranks find each other: rank 0 hosts it at
	// MASTER_ADDR:MASTER_PORT. Every connection is authenticated with
	// env.Secret (RINGDDP_SECRET).
	store, err := connectStore(ctx, env, rendezvous.StoreConfig{Timeout: w.timeout}, w)
	if err != nil {
		return err
	}
	defer store.Close() // after g.Close: rank 0 serves the store until both have left
	cfg := tcp.ConfigFromEnv(env, store)
	cfg.ConnectTimeout = w.timeout
	dctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	formed := func() {}
	if srv := store.Server(); srv != nil { // rank 0: say what happens while waiting
		var wctx context.Context
		wctx, formed = context.WithCancel(ctx)
		go watchFormation(wctx, srv, w, fail)
	}
	conn, err := tcp.Dial(dctx, cfg)
	formed()
	if err != nil {
		if cause := context.Cause(dctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	g, err := allreduce.NewGroup(conn) // the group owns conn
	if err != nil {
		conn.Close()
		return err
	}
	defer g.Close()
	r := float32(env.Rank + 1)
	buf := []float32{r, 10 * r, 100 * r}
	fmt.Fprintf(out, "rank %d of %d sends %v\n", g.Rank(), g.Size(), buf)
	if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
		return err
	}
	fmt.Fprintf(out, "rank %d of %d got the sum %v\n", g.Rank(), g.Size(), buf)
	// Rank 0 hosts the store: leave together.
	return allreduce.Barrier(ctx, g)
}
