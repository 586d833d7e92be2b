package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/run/rankrun"
	"github.com/ringddp/ringddp/numeric"
)

// benchmark runs the sweeps of cfg (one per algorithm) and writes the
// report to w.
//
// The transport is launch.Transport, the layer cmd/train shares (the
// -transport, -timeout and multi-process flags, their defaults, connecting
// and launching), resolved by parseConfig into cfg.tr, or the simulator
// (-transport sim). The benchmark drives each endpoint on its own
// goroutine and works out everything else (the slowest rank's time, the
// wrong-element total) with collectives, and every process derives every
// rank's inputs from the same seed, so it runs unchanged on any transport.
// Only the process holding rank 0 prints the report (and draws -plot).
func benchmark(ctx context.Context, cfg *config, w io.Writer) error {
	switch {
	case cfg.explain:
		return explain(cfg, w)
	case cfg.compare != "":
		return compare(cfg, w)
	case cfg.tr.Launcher(): // -transport tcp, not under a launcher: be one
		err := cfg.tr.Launch(ctx, cfg.args, cfg.rankCmd, w)
		if cfg.timeline != nil && err == nil {
			err = cfg.timeline.merge(cfg.tr.MP, os.Stderr)
		}
		return err
	}
	eps, err := openEndpoints(ctx, cfg)
	if err != nil {
		return err
	}
	defer eps.close()
	stopProfile, err := startCPUProfile(cfg)
	if err != nil {
		return err
	}
	defer stopProfile()
	if !cfg.tr.HoldsRank0() {
		w = io.Discard // rank 0's process prints the report
	}
	if cfg.calibrate != "" {
		return runCalibration(ctx, cfg, eps, w)
	}
	p := newPrinter(cfg, w)
	if err := p.header(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := sweepAll(ctx, cfg, eps, p); err != nil {
		return err
	}
	if err := p.footer(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := cfg.timeline.write(cfg.mp != nil); err != nil {
		return err
	}
	if cfg.plot != "" && cfg.tr.HoldsRank0() {
		if err := writePlotFile(cfg, cfg.plot, p.rows); err != nil {
			return err
		}
		notes := w
		if cfg.json {
			notes = os.Stderr // stdout carries the JSON rows only
		}
		fmt.Fprintf(notes, "plot: %s\n", cfg.plot)
	}
	if p.wrong > 0 {
		return fmt.Errorf("%d wrong elements (see the #wrong column)", p.wrong)
	}
	return nil
}

// sweepAll runs a sweep of every algorithm of cfg.algos, in order, each
// on fresh endpoints (eps.next), and hands the rows to p.
func sweepAll(ctx context.Context, cfg *config, eps *endpoints, p *printer) error {
	switch cfg.dtype {
	case allreduce.Float32:
		return sweeps[float32](ctx, cfg, eps, p)
	case allreduce.Float64:
		return sweeps[float64](ctx, cfg, eps, p)
	case allreduce.Int32:
		return sweeps[int32](ctx, cfg, eps, p)
	case allreduce.Int64:
		return sweeps[int64](ctx, cfg, eps, p)
	case allreduce.Float16:
		return sweeps[numeric.Float16](ctx, cfg, eps, p)
	case allreduce.BFloat16:
		return sweeps[numeric.BFloat16](ctx, cfg, eps, p)
	}
	return fmt.Errorf("-dtype %v: not supported", cfg.dtype)
}

// sweeps runs every algorithm's sweep over one dataset.
func sweeps[T allreduce.Numeric](ctx context.Context, cfg *config, eps *endpoints, p *printer) error {
	data := newDataset[T](cfg)
	for _, a := range cfg.algos {
		for _, sch := range cfg.schedules {
			f, err := eps.next(ctx)
			if err != nil {
				return err
			}
			err = sweep(ctx, cfg, a, sch, f, data, p)
			f.closeWorld()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// sweep runs one goroutine per local endpoint for the whole sweep of
// algorithm a (each with its own Group and buffers) and hands the rows
// that rank 0 produces to p.
func sweep[T allreduce.Numeric](ctx context.Context, cfg *config, a allreduce.Algorithm, sch allreduce.RootedSchedule, f fleet, data *dataset[T], p *printer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sw := &sweepState[T]{cfg: cfg, algo: a, schedule: sch, data: data}
	if f.world != nil {
		sw.tally = newSimTally(cfg.ranks)
		if n := cfg.virtualBytes(); n > 0 {
			if sw.virtual = virtualElems[T](f.world.Buffer(n)); sw.virtual == nil {
				return fmt.Errorf("-transport %s: no virtual arena of %d bytes", simTransport, n)
			}
		}
	}
	opts := []allreduce.GroupOption{allreduce.WithAlgorithm(a), allreduce.WithRootedSchedule(sch)}
	if cfg.model != nil && cfg.calibrate == "" { // -calibrate: the fitted model is rank 0's alone
		opts = append(opts, allreduce.WithModel(*cfg.model))
	}
	rows := make(chan row)
	var errs []error
	go func() {
		// A rank that fails aborts its group, so the others fail at once
		// instead of waiting for their timeout; the groups and endpoints
		// are closed when every rank has returned.
		errs = rankrun.Run(f.conns, func(g *allreduce.Group) error {
			return rankMain(ctx, sw, g, rows)
		}, opts...)
		close(rows)
	}()

	var werr error
	for r := range rows {
		if werr == nil {
			if werr = p.row(r); werr != nil {
				cancel() // stop the ranks; keep draining until they return
			}
		}
	}
	if werr != nil {
		return fmt.Errorf("writing the report: %w", werr)
	}
	for i, err := range errs {
		if err != nil {
			// The rank's own number (conns[i] is rank i only in process).
			return fmt.Errorf("-algo %s: rank %d: %w", a, f.conns[i].Rank(), err)
		}
	}
	return nil
}

// sweepState is what the ranks of one sweep share.
type sweepState[T allreduce.Numeric] struct {
	cfg      *config
	algo     allreduce.Algorithm
	schedule allreduce.RootedSchedule // broadcast's and reduce's
	data     *dataset[T]
	virtual  []T       // -transport sim: the virtual arena every timing-only row uses
	tally    *simTally // -transport sim: the ranks' figures, combined without collectives
}

// name is what the sweep's rows call what ran: the all-reduce algorithm,
// broadcast's or reduce's schedule, or -algo as given for the collectives
// that have one algorithm.
func (sw *sweepState[T]) name() string {
	switch {
	case sw.cfg.op.kind == allreduce.KindAllReduce:
		return sw.algo.String()
	case sw.cfg.op.rooted:
		return sw.schedule.String()
	}
	return sw.cfg.algo
}
