//go:build ringddp_cuda

package main

// -transport cuda (built with -tags ringddp_cuda): every rank a goroutine on one
// GPU, the collectives of package allreduce/cuda. The mode is intercepted
// before main parses its flags (this file's init), so that the default
// build's files stay as they are: it takes its own, smaller set of flags
// and prints the usual table with two more columns (a device-to-device
// copy of the minimum bytes, and the ratio to it).
//
//	go build -tags ringddp_cuda -o bench ./cmd/bench
//	./bench -transport cuda -ranks 4 -min 8 -max 256M -factor 4

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cuda"
	"github.com/ringddp/ringddp/internal/bytesize"
)

func init() {
	args := os.Args[1:]
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == "transport=cuda" || (a == "transport" && i+1 < len(args) && args[i+1] == "cuda") {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			err := cudaMain(ctx, args)
			stop()
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
}

func cudaMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench -transport cuda", flag.ContinueOnError)
	fs.String("transport", "cuda", "cuda: every rank a goroutine on one GPU (package allreduce/cuda)")
	ranks := fs.Int("ranks", 4, "ranks on the GPU")
	device := fs.Int("device", 0, "GPU ordinal")
	op := fs.String("op", "allreduce", "allreduce, reducescatter or allgather")
	dtype := fs.String("dtype", "float32", "float32, float64, int32 or int64")
	redop := fs.String("redop", "sum", "sum, avg, max, min or prod")
	minS := fs.String("min", "8", "smallest size in bytes (K, M, G suffixes)")
	maxS := fs.String("max", "256M", "largest size in bytes")
	factor := fs.Int("factor", 2, "each size this many times the last")
	iters := fs.Int("iters", 20, "timed iterations per size")
	warmup := fs.Int("warmup", 5, "untimed iterations per size")
	check := fs.Bool("check", true, "check allreduce results against the sequential reduction before timing")
	seg := fs.String("seg", "0", "ring segment size (0: the default, 16M)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := cuda.BenchConfig{Device: *device, Ranks: *ranks, Factor: *factor, Iters: *iters, Warmup: *warmup, Check: *check}
	switch *op {
	case "allreduce":
		cfg.Op = allreduce.KindAllReduce
	case "reducescatter":
		cfg.Op = allreduce.KindReduceScatter
	case "allgather":
		cfg.Op = allreduce.KindAllGather
	default:
		return fmt.Errorf("-op %q: -transport cuda runs allreduce, reducescatter or allgather", *op)
	}
	var ok bool
	if cfg.DType, ok = dtypes[*dtype]; !ok {
		return fmt.Errorf("-dtype %q: want float32, float64, int32 or int64", *dtype)
	}
	ops := map[string]allreduce.ReduceOp{"sum": allreduce.Sum, "avg": allreduce.Avg, "max": allreduce.Max, "min": allreduce.Min, "prod": allreduce.Prod}
	if cfg.Redop, ok = ops[*redop]; !ok {
		return fmt.Errorf("-redop %q: want sum, avg, max, min or prod", *redop)
	}
	var err error
	if cfg.Min, err = bytesize.Parse(*minS); err != nil {
		return fmt.Errorf("-min: %w", err)
	}
	if cfg.Max, err = bytesize.Parse(*maxS); err != nil {
		return fmt.Errorf("-max: %w", err)
	}
	if cfg.SegBytes, err = bytesize.Parse(*seg); err != nil {
		return fmt.Errorf("-seg: %w", err)
	}
	return cuda.Bench(ctx, cfg, os.Stdout)
}
