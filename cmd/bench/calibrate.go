package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// calibrate is -calibrate FILE: it measures this machine's cost model
// over the run's transport and writes it, with every algorithm's measured
// times, as a profile (cost.WriteProfile):
//
//  1. α and β: a ring exchange among all the ranks at once over the
//     transport's own endpoints (ringExchange), 8 B to -calib-max, fitted
//     in up to three regimes (calibrate.FitLink: large messages, the
//     cache regime, the small-message regime); Intra = Inter = that link
//     (one host); across nodes each link timed alone instead
//     (calibrateLinks, linkcalib.go), NICs too;
//  2. γ: the same exchange with a reducing sink at the large sizes, the
//     extra time per byte (calibrate.FitGamma);
//  3. every runnable algorithm (or -algo's list, auto aside) timed over
//     the sweep (-min, -max, -factor; medians over -iters), printed as the
//     usual table with each algorithm's predicted time beside it, and
//     stored as the profile's measurements;
//  4. the model refitted to those measurements
//     (calibrate.RefitWithCores): the rates, the regimes' sizes and Ports
//     (how a rank's sends to several peers overlap, which only the
//     algorithms' times show); the profile's model (across nodes, the
//     links as timed: the refit fits one link for both; refitModel).
//
// Over tcp every rank process runs it and rank 0's process fits, prints
// and writes the profile. The groups keep cost.DefaultModel (only
// rank 0's process knows the fitted one, and the ranks' models must
// agree); the predictions use the fitted model.
func runCalibration(ctx context.Context, cfg *config, eps *endpoints, w io.Writer) error {
	f, err := eps.next(ctx)
	if err != nil {
		return err
	}
	shape := plannedShape(cfg)
	var m *cost.Model
	if shape.Nodes > 1 {
		m, err = calibrateLinks(ctx, cfg, f.conns, shape, w)
	} else {
		m, err = calibrateOneLink(ctx, cfg, f.conns, w)
	}
	f.closeConns()
	if err != nil {
		return err
	}
	holds0 := m != nil
	if holds0 {
		cfg.model, cfg.modelFrom = m, "fitted above"
	}

	algos := cfg.algos
	rounds, err := sweepRounds(ctx, cfg, eps, algos, func(order []allreduce.Algorithm) { cfg.algos = order })
	cfg.algos = algos
	if err != nil {
		return err
	}
	p, err := printRounds(cfg, w, rounds)
	if err != nil {
		return err
	}
	rooted, err := timeRooted(ctx, cfg, eps, w)
	if err != nil {
		return err
	}
	if !holds0 {
		return nil
	}
	timings := calibTimings(p.rows)
	if err := calibrate.WriteAccuracy(w, timings); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	refit, err := refitModel(cfg, w, shape, calibrate.Samples(timings))
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	prof := cost.Profile{Transport: cfg.transport, Ranks: cfg.ranks, Created: time.Now().UTC().Format(time.RFC3339), Model: refit}
	prof.Nodes, prof.LocalSize = shape.Nodes, shape.LocalSize
	prof.IntraTransport, prof.InterTransport = linkTransports(cfg.transport, shape.Nodes)
	prof.Host, _ = os.Hostname()
	for _, r := range append(slices.Clone(p.rows), rooted...) {
		m := cost.Measurement{Algorithm: r.Algo, Bytes: r.Bytes, Seconds: r.TimeUS * 1e-6, MinSeconds: r.minUS * 1e-6}
		if r.Op != "allreduce" {
			m.Collective = r.Op
		}
		prof.Measurements = append(prof.Measurements, m)
	}
	if err := cost.WriteProfile(cfg.calibrate, prof); err != nil {
		return fmt.Errorf("-calibrate %s: %w", cfg.calibrate, err)
	}
	_, err = fmt.Fprintf(w, "# profile written to %s (%d measurements): use it with -profile %s or %s=%s\n",
		cfg.calibrate, len(prof.Measurements), cfg.calibrate, cost.ProfileEnv, cfg.calibrate)
	return err
}

// calibrateOneLink is steps 1 and 2 on one host: the ring exchange of
// every rank, fitted as both links, and γ; nil outside rank 0's process.
func calibrateOneLink(ctx context.Context, cfg *config, conns []transport.Conn, w io.Writer) (*cost.Model, error) {
	sizes := calibrate.PingSizes(cfg.calibMax)
	perStep, note, err := ringExchange(ctx, cfg, conns, sizes, false, allRanks)
	var reduced []float64
	large := calibrate.LargeSizes(sizes)
	if err == nil && len(large) > 0 {
		var more string
		reduced, more, err = ringExchange(ctx, cfg, conns, large, true, allRanks)
		note += more
	}
	if err != nil {
		return nil, fmt.Errorf("-calibrate: ring exchange among the %d ranks: %w", cfg.ranks, err)
	}
	if perStep == nil {
		return nil, nil
	}
	fit := calibrate.FitLink(sizes, perStep)
	kernel, gbytes, err := measureGamma(cfg)
	if err != nil {
		return nil, fmt.Errorf("-calibrate: timing the reduce kernel: %w", err)
	}
	gamma := calibrate.FitGamma(sizes, perStep, large, reduced, kernel)
	// Segment is the transport's, not fitted: the groups timed
	// below run with it (they keep the default model).
	// Cores is the host's (or -cores), not fitted: the refit tries it
	// and no cores bound (calibrate.RefitWithCores, cost.Work).
	m := cost.Model{Intra: fit.Link, Inter: fit.Link, Gamma: gamma, Segment: defaultModel(cfg.transport).Segment, Cores: cfg.calibCores}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("-calibrate: the fitted model: %w", err)
	}
	e := calibrate.Exchange{Transport: cfg.transport, Ranks: cfg.ranks, Iters: cfg.iters, Warmup: cfg.warmup,
		Sizes: sizes, PerStep: perStep, Fit: fit, Large: large, Reduced: reduced, Gamma: gamma, Kernel: kernel, KernelBytes: gbytes}
	if err := calibrate.WriteExchange(w, e); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	if _, err := io.WriteString(w, note); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	return &m, nil
}

// calibrateLinks is steps 1 and 2 across the nodes of s: each link timed
// alone (measureLinks) and fitted (fitTwoLinks); nil outside rank 0's
// process.
func calibrateLinks(ctx context.Context, cfg *config, conns []transport.Conn, s cost.Shape, w io.Writer) (*cost.Model, error) {
	sizes := calibrate.PingSizes(cfg.calibMax)
	large := calibrate.LargeSizes(sizes)
	t, err := measureLinks(ctx, cfg, conns, s, sizes, large)
	if err != nil {
		return nil, fmt.Errorf("-calibrate: %w", err)
	}
	if t.inter == nil {
		return nil, nil
	}
	kernel, gbytes, err := measureGamma(cfg)
	if err != nil {
		return nil, fmt.Errorf("-calibrate: timing the reduce kernel: %w", err)
	}
	m, err := fitTwoLinks(cfg, w, s, sizes, large, t, kernel, gbytes)
	if err != nil {
		return nil, fmt.Errorf("-calibrate: %w", err)
	}
	return &m, nil
}

// refitModel is step 4: on one host, the model refitted to the
// algorithms' times (calibrate.RefitWithCores, RefitForChoices), with its
// report; across nodes the model of the links as fitted (the refit fits
// one link for both). Either way, Auto's picks against the measured
// fastest.
func refitModel(cfg *config, w io.Writer, s cost.Shape, samples []calibrate.Sample) (cost.Model, error) {
	m := *cfg.model
	if s.Nodes > 1 {
		if _, err := fmt.Fprintf(w, "# model written: the links as timed alone (%d nodes; the refit to the algorithms' times fits one link for both, so it is not run)\n", s.Nodes); err != nil {
			return m, err
		}
	} else {
		refit, before, after, coresNote := calibrate.RefitWithCores(m, samples)
		refit, after, choiceNote := calibrate.RefitForChoices(refit, after, samples)
		if _, err := io.WriteString(w, coresNote+choiceNote); err != nil {
			return m, err
		}
		if err := calibrate.PrintRefit(w, before, after, refit, samples); err != nil {
			return m, err
		}
		m = refit
	}
	return m, calibrate.PrintAutoPicks(w, calibrate.AutoPicks(m, samples))
}

// linkTransports names the transports the profile's links were timed
// over: within a node, shared memory under -transport auto, else the
// transport itself; between nodes (several nodes only), tcp under
// -transport auto, else the transport itself (in process, nodes that
// -local-size simulates).
func linkTransports(tr string, nodes int) (intra, inter string) {
	intra, inter = tr, tr
	if tr == launch.Auto {
		intra, inter = "shm", "tcp"
	}
	if nodes <= 1 {
		inter = ""
	}
	return intra, inter
}

// sweepRounds times every one of order (all-reduce algorithms, or
// broadcast's and reduce's schedules, which set puts into cfg) at every
// size in calibRounds sweeps and returns each round's rows in order's
// order; each cell is to be the median of its rounds (medianRows), so
// that one round's noise (a neighbour's burst on a shared host) does not
// decide a choice. Each round starts the order one further along
// (rotated), so that nothing always runs after the same one: what ran
// before moves an algorithm's time (by tens of percent over tcp on a
// shared host: docs/measurements.md).
func sweepRounds[A fmt.Stringer](ctx context.Context, cfg *config, eps *endpoints, order []A, set func([]A)) ([][]row, error) {
	var rounds [][]row
	for i := range calibRounds {
		set(rotated(order, i))
		quiet := newPrinter(cfg, io.Discard)
		if err := sweepAll(ctx, cfg, eps, quiet); err != nil {
			return nil, err
		}
		rounds = append(rounds, inAlgoOrder(quiet.rows, order))
	}
	return rounds, nil
}

// printRounds prints the table of rounds' medians (medianRows) under a
// header for cfg's collective and returns its printer, whose rows are
// those medians; wrong elements are an error.
func printRounds(cfg *config, w io.Writer, rounds [][]row) (*printer, error) {
	p := newPrinter(cfg, w)
	if err := p.header(); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	for _, r := range medianRows(rounds) {
		if err := p.row(r); err != nil {
			return nil, fmt.Errorf("writing the report: %w", err)
		}
	}
	if err := p.footer(); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	if p.wrong > 0 {
		return nil, fmt.Errorf("%d wrong elements (see the #wrong column); no profile written", p.wrong)
	}
	if err := calibrate.WriteDrift(w, roundTimes(rounds)); err != nil {
		return nil, fmt.Errorf("writing the report: %w", err)
	}
	return p, nil
}

// timeRooted times Broadcast and Reduce (root 0) under each of their
// schedules, the binomial tree and the chain, over the sweep: calibRounds
// rounds, the schedules' order rotated, each cell the median of its
// rounds, printed as a table each. They go into the profile beside the
// all-reduce times, for checking the model's choice of schedule
// (the selector) against; the refit does not use them. None on two ranks,
// where there is only the tree.
func timeRooted(ctx context.Context, cfg *config, eps *endpoints, w io.Writer) ([]row, error) {
	if cfg.ranks < 3 {
		return nil, nil
	}
	op, algos, schedules, root := cfg.op, cfg.algos, cfg.schedules, cfg.root
	defer func() { cfg.op, cfg.algos, cfg.schedules, cfg.root = op, algos, schedules, root }()
	cfg.algos, cfg.root = []allreduce.Algorithm{allreduce.Auto}, 0
	both := []allreduce.RootedSchedule{allreduce.RootedTree, allreduce.RootedChain}
	var out []row
	for _, name := range []string{"broadcast", "reduce"} {
		cfg.op = collectives[name]
		rounds, err := sweepRounds(ctx, cfg, eps, both, func(order []allreduce.RootedSchedule) { cfg.schedules = order })
		if err != nil {
			return nil, err
		}
		cfg.schedules = both
		p, err := printRounds(cfg, w, rounds)
		if err != nil {
			return nil, err
		}
		out = append(out, p.rows...)
	}
	return out, nil
}

// calibRounds is how many times -calibrate sweeps every algorithm: 5, as
// with 3 a cell could rank two algorithms opposite to a longer measurement
// (docs/measurements.md has the case).
const calibRounds = 5

// medianRows merges rounds of the same sweep (the same rows in the same
// order): each row takes the median of its rounds' times
// (calibrate.CellMedians), with its bandwidths and measured/predicted
// ratio recomputed from it, and the most wrong elements any round saw.
func medianRows(rounds [][]row) []row {
	if len(rounds) == 0 {
		return nil
	}
	medians, minimums := calibrate.CellMedians(roundTimes(rounds))
	out := make([]row, len(rounds[0]))
	for i, r := range rounds[0] {
		for _, rs := range rounds {
			if i < len(rs) && rs[i].Wrong != nil && (r.Wrong == nil || *rs[i].Wrong > *r.Wrong) {
				r.Wrong = rs[i].Wrong
			}
		}
		r.minUS = minimums[i]
		t := medians[i]
		if r.TimeUS > 0 {
			f := r.TimeUS / t
			r.AlgBW, r.BusBW = r.AlgBW*f, r.BusBW*f
		}
		r.TimeUS = t
		if r.PredUS != nil && *r.PredUS > 0 {
			ratio := t / *r.PredUS
			r.Ratio = &ratio
		}
		out[i] = r
	}
	return out
}

// roundTimes is each round's rows' times (µs), the rounds' cells for
// calibrate.CellMedians and calibrate.WriteDrift.
func roundTimes(rounds [][]row) [][]float64 {
	out := make([][]float64, len(rounds))
	for i, rs := range rounds {
		out[i] = make([]float64, len(rs))
		for j, r := range rs {
			out[i][j] = r.TimeUS
		}
	}
	return out
}

// rotated is s started at index k mod len(s).
func rotated[T any](s []T, k int) []T {
	if len(s) == 0 {
		return s
	}
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// inAlgoOrder sorts rows into the order of algos (all-reduce algorithms,
// or broadcast's and reduce's schedules; stably: each one's sizes stay in
// order), as medianRows needs every round's rows in the same order.
func inAlgoOrder[A fmt.Stringer](rows []row, algos []A) []row {
	index := func(r row) int {
		for i, a := range algos {
			if a.String() == r.Algo {
				return i
			}
		}
		return len(algos)
	}
	out := slices.Clone(rows)
	slices.SortStableFunc(out, func(a, b row) int { return index(a) - index(b) })
	return out
}

// calibTimings are the rows as the calibration's timings: the refit's
// samples (calibrate.Samples) and the accuracy summary
// (calibrate.WriteAccuracy).
func calibTimings(rows []row) []calibrate.Timing {
	out := make([]calibrate.Timing, len(rows))
	for i, r := range rows {
		out[i] = calibrate.Timing{Algo: r.Algo, Bytes: r.Bytes, Seconds: r.TimeUS * 1e-6, Shape: r.shape, Ratio: math.NaN()}
		if r.Ratio != nil {
			out[i].Ratio = *r.Ratio
		}
	}
	return out
}
