// Command tcp_two_terminals all-reduces a small vector between two
// processes over TCP: the smallest multi-process ringddp program.
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
// the environment the program is its own launcher: it starts itself twice,
// as above, and forwards both ranks' output (rank 1's prefixed):
//
//	go run ./examples/tcp_two_terminals
//
// Start only one, and it waits for the other up to -connect-timeout, then
// fails naming the rank that never came.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/launch"
)

func main() {
	connectTimeout := flag.Duration("connect-timeout", time.Minute, "how long to wait for the other rank")
	flag.Parse()
	ctx := context.Background()
	var err error
	if _, isRank, derr := launch.Detect(os.Getenv); derr != nil {
		err = derr
	} else if isRank {
		err = run(ctx, launch.Options{ConnectTimeout: *connectTimeout}, os.Stdout)
	} else {
		err = launch.Run(ctx, launch.Config{Ranks: 2})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp_two_terminals:", err)
		os.Exit(1)
	}
}

// run is one rank: connect, all-reduce, print.
func run(ctx context.Context, opts launch.Options, out io.Writer) error {
	conn, env, err := launch.Connect(ctx, opts)
	if err != nil {
		return err
	}
	g, err := allreduce.NewGroup(conn) // the group owns conn (and, on rank 0, the store)
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
