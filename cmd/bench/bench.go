package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// seed makes the inputs; every process of a multi-process run derives the
// same inputs from it, so each can compute the reference on its own.
const seed = 1

// poison fills output-only buffers before the checked iteration, so that an
// element the collective failed to write is counted wrong. No input (small
// integers) or reference result of a realistic rank count equals it, and it
// is exact in every dtype.
const poison = 16777213

// benchmark runs the sweep of cfg and writes the report to w.
//
// The transport is launch.Transport, the layer cmd/train shares (the
// -transport, -timeout and multi-process flags, their defaults, connecting
// and launching), resolved by parseConfig into cfg.tr. The benchmark
// drives each endpoint on its own goroutine and works out everything else
// (the slowest rank's time, the wrong-element total) with collectives, and
// every process derives every rank's inputs from the same seed, so it runs
// unchanged on any transport. Only the process holding rank 0 prints the
// report.
func benchmark(ctx context.Context, cfg *config, w io.Writer) error {
	if cfg.tr.Launcher() { // -transport tcp, not under a launcher: be one
		return cfg.tr.Launch(ctx, cfg.args, cfg.rankCmd, w)
	}
	conns, err := cfg.tr.Connect(ctx, cfg.ranks)
	if err != nil {
		return fmt.Errorf("-transport %s: %w", cfg.transport, err)
	}
	stopProfile, err := startCPUProfile(cfg, conns)
	if err != nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return err
	}
	defer stopProfile()
	switch cfg.dtype {
	case allreduce.Float32:
		return sweep[float32](ctx, cfg, conns, w)
	case allreduce.Float64:
		return sweep[float64](ctx, cfg, conns, w)
	case allreduce.Int32:
		return sweep[int32](ctx, cfg, conns, w)
	case allreduce.Int64:
		return sweep[int64](ctx, cfg, conns, w)
	}
	return fmt.Errorf("-dtype %v: not supported", cfg.dtype)
}

// sweep runs one goroutine per local endpoint for the whole run (each with
// its own Group and buffers) and prints the rows that rank 0 produces.
func sweep[T allreduce.Numeric](ctx context.Context, cfg *config, conns []transport.Conn, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !cfg.tr.HoldsRank0() {
		w = io.Discard // rank 0's process prints the report
	}
	data := newDataset[T](cfg)
	rows := make(chan row)
	var errs []error
	go func() {
		// A rank that fails aborts its group, so the others fail at once
		// instead of waiting for their timeout; the groups and endpoints
		// are closed when every rank has returned.
		errs = allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
			return rankMain[T](ctx, cfg, g, data, rows)
		}, allreduce.WithAlgorithm(cfg.algorithm))
		close(rows)
	}()

	p := newPrinter(cfg, w)
	werr := p.header()
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
			return fmt.Errorf("rank %d: %w", conns[i].Rank(), err)
		}
	}
	if err := p.footer(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if p.wrong > 0 {
		return fmt.Errorf("%d wrong elements (see the #wrong column)", p.wrong)
	}
	return nil
}

// dataset holds what the local ranks share: every rank's input (made once, at
// the largest count) and the expected result of the current size. A
// multi-process transport would regenerate the inputs of remote ranks from
// the seed; in process they are the ranks' own.
type dataset[T allreduce.Numeric] struct {
	cfg      *config
	maxCount int

	mu       sync.Mutex
	inputs   [][]T
	expCount int
	exp      []T
}

func newDataset[T allreduce.Numeric](cfg *config) *dataset[T] {
	sizes := cfg.sizes()
	return &dataset[T]{
		cfg:      cfg,
		maxCount: cfg.count(sizes[len(sizes)-1]),
		inputs:   make([][]T, cfg.ranks),
		expCount: -1,
	}
}

// input is rank's input at the largest count.
func (d *dataset[T]) input(rank int) []T {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inputLocked(rank)
}

func (d *dataset[T]) inputLocked(rank int) []T {
	if d.inputs[rank] == nil {
		d.inputs[rank] = allreducetest.Input[T](seed, rank, d.maxCount, d.cfg.redop)
	}
	return d.inputs[rank]
}

// expected is the full result of the collective on count elements (for
// all-reduce, reduce-scatter and reduce the reduction of every rank's
// input, for all-gather the concatenation of every rank's chunk, for
// broadcast the root's input). It is computed once per size by the first
// rank that asks, and never modified afterwards.
func (d *dataset[T]) expected(count int) []T {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expCount == count {
		return d.exp
	}
	n := d.cfg.ranks
	var exp []T
	switch d.cfg.op.kind {
	case allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindReduce:
		ins := make([][]T, n)
		for r := range ins {
			ins[r] = d.inputLocked(r)[:count]
		}
		exp = allreducetest.Reduce(ins, d.cfg.redop)
	case allreduce.KindAllGather:
		exp = make([]T, count)
		for r := range n {
			lo, hi := allreduce.ChunkBounds(count, n, r)
			copy(exp[lo:hi], d.inputLocked(r)[lo:hi])
		}
	case allreduce.KindBroadcast:
		exp = d.inputLocked(d.cfg.root)[:count]
	}
	d.exp, d.expCount = exp, count
	return exp
}

// rankState is one rank's buffers, allocated once at the largest size.
type rankState[T allreduce.Numeric] struct {
	cfg   *config
	g     *allreduce.Group
	rank  int
	in    []T       // this rank's input (shared, read only)
	buf   []T       // in/out buffer, or dst of reduce-scatter and all-gather
	times []float64 // per timed iteration, µs
	one   []int64   // the wrong count, for the all-reduce that sums it
}

// rankMain is one rank's whole run: every size, warm-up, timed iterations,
// the checked iteration, and the all-reduces that find the slowest rank's
// times and the total of wrong elements. Rank 0 sends the rows.
func rankMain[T allreduce.Numeric](ctx context.Context, cfg *config, g *allreduce.Group, data *dataset[T], rows chan<- row) error {
	n, rank := g.Size(), g.Rank()
	if n != cfg.ranks {
		return fmt.Errorf("transport has %d ranks, -ranks is %d", n, cfg.ranks)
	}
	s := &rankState[T]{
		cfg:   cfg,
		g:     g,
		rank:  rank,
		in:    data.input(rank),
		times: make([]float64, cfg.iters),
		one:   make([]int64, 1),
	}
	if cfg.op.kind == allreduce.KindReduceScatter {
		s.buf = make([]T, data.maxCount/n)
	} else {
		s.buf = make([]T, data.maxCount)
	}
	esz := cfg.dtype.Size()
	for _, size := range cfg.sizes() {
		count := cfg.count(size)
		lo, hi := allreduce.ChunkBounds(count, n, rank)

		s.reset(count, lo, hi)
		for i := range cfg.warmup + cfg.iters {
			if err := allreduce.Barrier(ctx, g); err != nil {
				return err
			}
			t0 := time.Now()
			if err := s.exec(ctx, count, lo, hi); err != nil {
				return err
			}
			if d := time.Since(t0); i >= cfg.warmup {
				s.times[i-cfg.warmup] = float64(d.Nanoseconds()) / 1e3
			}
		}
		// The slowest rank's time of each iteration.
		if err := allreduce.AllReduce(ctx, g, s.times, allreduce.Max); err != nil {
			return err
		}

		var wrong *int64
		if cfg.check {
			s.reset(count, lo, hi)
			if err := s.exec(ctx, count, lo, hi); err != nil {
				return err
			}
			s.one[0] = s.countWrong(data.expected(count), count, lo, hi)
			if err := allreduce.AllReduce(ctx, g, s.one, allreduce.Sum); err != nil {
				return err
			}
			wrong = &s.one[0]
		}

		if rank != 0 {
			continue
		}
		r := newRow(cfg, count*esz, count, median(s.times), wrong)
		select {
		case rows <- r:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// reset loads the inputs of a size into the buffers and poisons the
// output-only ones.
func (s *rankState[T]) reset(count, lo, hi int) {
	switch s.cfg.op.kind {
	case allreduce.KindAllReduce, allreduce.KindReduce:
		copy(s.buf[:count], s.in[:count])
	case allreduce.KindBroadcast:
		if s.rank == s.cfg.root {
			copy(s.buf[:count], s.in[:count])
		} else {
			fill(s.buf[:count], poison)
		}
	case allreduce.KindReduceScatter:
		fill(s.buf[:hi-lo], poison)
	case allreduce.KindAllGather:
		fill(s.buf[:count], poison)
	}
}

// exec runs the collective once on count elements; [lo, hi) is this rank's
// chunk. It allocates nothing.
func (s *rankState[T]) exec(ctx context.Context, count, lo, hi int) error {
	cfg := s.cfg
	switch cfg.op.kind {
	case allreduce.KindAllReduce:
		return allreduce.AllReduce(ctx, s.g, s.buf[:count], cfg.redop)
	case allreduce.KindReduceScatter:
		return allreduce.ReduceScatter(ctx, s.g, s.buf[:hi-lo], s.in[:count], cfg.redop)
	case allreduce.KindAllGather:
		return allreduce.AllGather(ctx, s.g, s.buf[:count], s.in[lo:hi])
	case allreduce.KindBroadcast:
		return allreduce.Broadcast(ctx, s.g, s.buf[:count], cfg.root)
	case allreduce.KindReduce:
		return allreduce.Reduce(ctx, s.g, s.buf[:count], cfg.redop, cfg.root)
	}
	return errors.New("unknown collective")
}

// countWrong counts this rank's elements that differ from the expected
// result. Reduce leaves non-root buffers unchanged, so they must still hold
// the input.
func (s *rankState[T]) countWrong(exp []T, count, lo, hi int) int64 {
	switch s.cfg.op.kind {
	case allreduce.KindReduceScatter:
		return diff(s.buf[:hi-lo], exp[lo:hi])
	case allreduce.KindReduce:
		if s.rank != s.cfg.root {
			return diff(s.buf[:count], s.in[:count])
		}
	}
	return diff(s.buf[:count], exp[:count])
}

// diff counts the positions where got and want differ (a NaN always does).
func diff[T allreduce.Numeric](got, want []T) int64 {
	var n int64
	for i, x := range got {
		if x != want[i] {
			n++
		}
	}
	return n
}

func fill[T allreduce.Numeric](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

// median of xs; it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}
