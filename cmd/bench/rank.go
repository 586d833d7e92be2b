package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/internal/trace"
)

// rankState is one rank's buffers, allocated once at the largest size.
type rankState[T allreduce.Numeric] struct {
	cfg   *config
	g     *allreduce.Group
	rank  int
	in    []T       // this rank's input (shared, read only) or, in a timing-only row, the virtual arena
	buf   []T       // in/out buffer, or dst of reduce-scatter and all-gather
	times []float64 // per timed iteration, µs
	one   []int64   // the wrong count, for the all-reduce that sums it
}

// clock times a rank's collectives: wall time after a barrier on a real
// transport, virtual time after AlignClocks on the simulator.
type clock interface {
	sync(ctx context.Context) error   // start every rank together
	finish(ctx context.Context) error // end a timed collective (before now)
	now() float64                     // seconds
}

// wallClock is a real rank's clock.
type wallClock struct {
	g      *allreduce.Group
	origin time.Time
}

func (k wallClock) sync(ctx context.Context) error   { return allreduce.Barrier(ctx, k.g) }
func (k wallClock) finish(ctx context.Context) error { return nil }
func (k wallClock) now() float64                     { return time.Since(k.origin).Seconds() }

// Fresh endpoints settle. A sweep runs on endpoints of its own (fresh
// connections, goroutines and Group), and its first collectives run slow
// for a while: a small all-reduce takes tens of untimed iterations to
// reach the time every later size of the sweep starts at, over tcp,
// shared memory and in process alike (docs/measurements.md has the
// figures). So the first size of a sweep runs settleIterations more
// untimed iterations than -warmup asks (none with -warmup 0, none on the
// simulator, whose time does not vary): up to settleMaxIterations, fewer
// where its bytes are many, at most settleBytes in all.
const (
	settleMaxIterations = 100
	settleBytes         = 64 << 20
)

// settleIterations is how many more untimed iterations a sweep's first
// size of the given bytes runs (see above): enough to move settleBytes,
// between 1 and settleMaxIterations.
func settleIterations(bytes int) int {
	if bytes <= 0 {
		return settleMaxIterations
	}
	return min(settleMaxIterations, max(1, (settleBytes+bytes-1)/bytes))
}

// rankMain is one rank's whole sweep: every size, warm-up, timed
// iterations, the checked iteration, and the combining of the slowest
// rank's times and the total of wrong elements. Rank 0 sends the rows.
// Every iteration starts after a barrier, or with -back-to-back the
// first only, each later one when the rank's last ends (its time then
// runs from that end to its own).
//
// On the simulator (sw.tally set) a size is one timed iteration from
// fresh inputs, which is also the checked one (virtual time does not
// vary), the clocks are aligned instead of a barrier, and a timing-only
// row runs on the virtual arena and is not checked.
func rankMain[T allreduce.Numeric](ctx context.Context, sw *sweepState[T], g *allreduce.Group, rows chan<- row) error {
	cfg, data := sw.cfg, sw.data
	n, rank := g.Size(), g.Rank()
	if n != cfg.ranks {
		return fmt.Errorf("transport has %d ranks, -ranks is %d", n, cfg.ranks)
	}
	shape := plannedShape(cfg) // exact for the simulator, whose layout the flags make
	if sw.tally == nil || sw.algo == allreduce.Auto || needsTopology(sw.algo) {
		// Learn it (Auto and the topology-aware algorithms would, in
		// their first, timed call). The simulator spares it the others:
		// on 1024 ranks it is a million messages.
		var err error
		if shape, err = g.Shape(ctx); err != nil {
			return err
		}
	}
	s := &rankState[T]{
		cfg:   cfg,
		g:     g,
		rank:  rank,
		times: make([]float64, cfg.iters),
		one:   make([]int64, 1),
	}
	var realIn, realBuf []T
	if data.maxCount > 0 {
		realIn, realBuf = data.input(rank), data.buffer(rank)
	}
	var clk clock = wallClock{g: g, origin: time.Now()}
	var simConn *sim.Conn
	if sw.tally != nil {
		simConn, _ = sim.ConnOf(g.Conn())
		clk = simClock{simConn}
	}
	esz := cfg.dtype.Size()
	rec := cfg.timeline.recorder(rank)
	for si, size := range cfg.sizes() {
		count := cfg.count(size)
		lo, hi := allreduce.ChunkBounds(count, n, rank)
		virtual := cfg.virtualAt(size)
		s.in, s.buf = realIn, realBuf
		if virtual {
			s.in, s.buf = sw.virtual, sw.virtual
		}

		s.reset(count, lo, hi, virtual)
		warmup := cfg.warmup
		if si == 0 && sw.tally == nil && warmup > 0 {
			warmup += settleIterations(count * esz)
		}
		for i := range warmup + cfg.iters {
			if i == 0 || !cfg.backToBack {
				if err := clk.sync(ctx); err != nil {
					return err
				}
			}
			t0 := clk.now()
			span := rec.Begin(trace.Comm, "collective", cfg.op.name).Str("algo", sw.algo.String()).Int("bytes", int64(count*esz)).Int("iter", int64(i))
			err := s.exec(ctx, count, lo, hi)
			span.End()
			if err != nil {
				return err
			}
			if err := clk.finish(ctx); err != nil {
				return err
			}
			if d := clk.now() - t0; i >= warmup {
				s.times[i-warmup] = d * 1e6
			}
		}

		wrong, err := s.settle(ctx, sw, simConn, count, lo, hi, virtual)
		if err != nil {
			return err
		}

		if rank != 0 {
			continue
		}
		r := newRow(cfg, sw.name(), count*esz, count, calibrate.Median(s.times), wrong)
		r.virtual = virtual
		predictRow(cfg, g, shape, &r)
		select {
		case rows <- r:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// settle checks the results of a size's run (-check) and combines over
// the ranks the slowest rank's time of each iteration and the total of
// wrong elements (nil: not checked).
func (s *rankState[T]) settle(ctx context.Context, sw *sweepState[T], simConn *sim.Conn, count, lo, hi int, virtual bool) (*int64, error) {
	var wrong *int64
	if s.cfg.check && !virtual {
		if sw.tally == nil { // a fresh run: the timed ones reduced their own results
			s.reset(count, lo, hi, false)
			if err := s.exec(ctx, count, lo, hi); err != nil {
				return nil, err
			}
		}
		s.one[0] = s.countWrong(sw.data.expected(count), count, lo, hi)
		wrong = &s.one[0]
	}
	if sw.tally != nil {
		return wrong, sw.tally.combine(ctx, simConn, s.times, wrong)
	}
	return wrong, combine(ctx, s.g, s.times, wrong, s.one)
}

// combine makes times the slowest rank's and, when wrong is set (one
// holds it), the wrong count every rank's total, with collectives.
func combine(ctx context.Context, g *allreduce.Group, times []float64, wrong *int64, one []int64) error {
	if err := allreduce.AllReduce(ctx, g, times, allreduce.Max); err != nil {
		return err
	}
	if wrong == nil {
		return nil
	}
	return allreduce.AllReduce(ctx, g, one, allreduce.Sum)
}

// reset loads the inputs of a size into the buffers and poisons the
// output-only ones; a virtual (timing-only) row has nothing to load.
func (s *rankState[T]) reset(count, lo, hi int, virtual bool) {
	if virtual {
		return
	}
	switch s.cfg.op.kind {
	case allreduce.KindAllReduce, allreduce.KindReduce:
		copy(s.buf[:count], s.in[:count])
	case allreduce.KindBroadcast:
		if s.rank == s.cfg.root {
			copy(s.buf[:count], s.in[:count])
		} else {
			fill(s.buf[:count], poisonOf[T]())
		}
	case allreduce.KindReduceScatter:
		fill(s.buf[:hi-lo], poisonOf[T]())
	case allreduce.KindAllGather:
		fill(s.buf[:count], poisonOf[T]())
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
