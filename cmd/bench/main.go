// Command bench is an nccl-tests-style benchmark of ringddp's collectives.
//
// It runs one collective (-op) over -ranks ranks on a transport, for sizes
// from -min to -max bytes (each -factor times the last), and prints one row
// per size: bytes, element count, dtype, reduction, root, algorithm, time,
// algorithm bandwidth, bus bandwidth and the number of wrong elements.
//
//	go run ./cmd/bench -op allreduce -ranks 4 -min 8 -max 64M -factor 8
//
// Time is the median over -iters iterations of the slowest rank's time. Every
// iteration starts with a barrier; each rank times the collective from its
// own exit from that barrier to its own return from the collective, and the
// iteration's time is the maximum over ranks. See README.md.
//
// -algo takes a list or all (one sweep per algorithm); -transport sim runs
// virtual ranks on the simulator (allreduce/sim) under the cost model,
// with virtual time; -explain prints the cost model's predictions and
// auto's picks without running; -plot draws busbw and time against size;
// -calibrate measures the cost model on this machine and writes a profile
// for -profile and RINGDDP_PROFILE.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/ringddp/ringddp/internal/run/launch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses args, runs the benchmark and writes its report to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return runWith(ctx, args, stdout, launch.ThisProgram)
}

// runWith is run with ranks as the command of a -transport tcp run's ranks.
func runWith(ctx context.Context, args []string, stdout io.Writer, ranks launch.RankCommand) error {
	cfg, err := parseConfig(args, stdout)
	if err != nil {
		return err
	}
	if cfg == nil { // -h
		return nil
	}
	cfg.rankCmd = ranks
	cfg.tr.ShareCores() // a tcp rank under another launcher: its share of the cores
	if _, err := cfg.tr.Bind(); err != nil {
		return err
	}
	return benchmark(ctx, cfg, stdout)
}
