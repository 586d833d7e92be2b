package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// calibrate is -calibrate FILE: it measures this machine's cost model
// over the run's transport and writes it, with every algorithm's measured
// times, as a profile (cost.WriteProfile):
//
//  1. α and β: a ring exchange among all the ranks at once over the
//     transport's own endpoints (ringExchange), 8 B to -calib-max, fitted
//     in up to three regimes (fitLink: large messages, the cache regime,
//     the small-message regime); Intra = Inter = that link (one host);
//  2. γ: the same exchange with a reducing sink at the large sizes, the
//     extra time per byte (fitGamma);
//  3. every runnable algorithm (or -algo's list, auto aside) timed over
//     the sweep (-min, -max, -factor; medians over -iters), printed as the
//     usual table with each algorithm's predicted time beside it, and
//     stored as the profile's measurements;
//  4. the model refitted to those measurements (refit.go): the rates,
//     the regimes' sizes and Ports (how a rank's sends to several peers
//     overlap, which only the algorithms' times show); the profile's
//     model.
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
	sizes := calibrate.PingSizes(cfg.calibMax)
	perStep, err := ringExchange(ctx, cfg, f.conns, sizes, false)
	var reduced []float64
	large := largeSizes(sizes)
	if err == nil && len(large) > 0 {
		reduced, err = ringExchange(ctx, cfg, f.conns, large, true)
	}
	f.closeConns()
	if err != nil {
		return fmt.Errorf("-calibrate: ring exchange among the %d ranks: %w", cfg.ranks, err)
	}
	holds0 := perStep != nil
	if holds0 {
		fit := calibrate.FitLink(sizes, perStep)
		kernel, gbytes, err := measureGamma(cfg)
		if err != nil {
			return fmt.Errorf("-calibrate: timing the reduce kernel: %w", err)
		}
		gamma := fitGamma(sizes, perStep, large, reduced, kernel)
		// Segment is the transport's, not fitted: the groups timed
		// below run with it (they keep the default model).
		// Cores is the host's (or -cores), not fitted: the refit tries it
		// and no cores bound (refitWithCores, cost.Work).
		m := cost.Model{Intra: fit.Link, Inter: fit.Link, Gamma: gamma, Segment: defaultModel(cfg.transport).Segment, Cores: cfg.calibCores}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("-calibrate: the fitted model: %w", err)
		}
		cfg.model, cfg.modelFrom = &m, "fitted above"
		if err := printFit(w, cfg, sizes, perStep, fit, large, reduced, gamma, kernel, gbytes); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
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
	samples := refitSamples(p.rows)
	refit, before, after, coresNote := calibrate.RefitWithCores(*cfg.model, samples)
	refit, after, choiceNote := calibrate.RefitForChoices(refit, after, samples)
	if err := printAccuracy(w, p.rows); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if _, err := io.WriteString(w, coresNote+choiceNote); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := calibrate.PrintRefit(w, before, after, refit, samples); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := calibrate.PrintAutoPicks(w, calibrate.AutoPicks(refit, samples)); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	prof := cost.Profile{Transport: cfg.transport, Ranks: cfg.ranks, Created: time.Now().UTC().Format(time.RFC3339), Model: refit}
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
	if err := writeDrift(w, rounds); err != nil {
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

// largeSizes are the sizes of at least 1 MiB, where the reducing ring
// exchange is timed to find γ (the smallest size when none is that large,
// as in tests' tiny calibrations).
func largeSizes(sizes []int) []int {
	for i, n := range sizes {
		if n >= 1<<20 {
			return sizes[i:]
		}
	}
	return sizes[len(sizes)-1:]
}

// fitGamma is γ: the median over the large sizes of the extra time per
// byte a reducing ring step takes over a copying one, both with every
// rank at work; the reduce kernel's own time (kernel, one goroutine
// alone) where that difference is not positive.
func fitGamma(sizes []int, perStep []float64, large []int, reduced []float64, kernel float64) float64 {
	var extra []float64
	for i, n := range large {
		for j, m := range sizes {
			if m == n {
				if d := (reduced[i] - perStep[j]) / float64(n); d > 0 {
					extra = append(extra, d)
				}
			}
		}
	}
	if len(extra) == 0 {
		return kernel
	}
	return calibrate.Median(extra)
}

// printFit reports the ring exchange, the fitted link and γ.
func printFit(w io.Writer, cfg *config, sizes []int, perStep []float64, fit calibrate.LinkFit, large []int, reduced []float64, gamma, kernel float64, gbytes int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# ringddp bench -calibrate: transport %s, ranks %d\n", cfg.transport, cfg.ranks)
	fmt.Fprintf(&b, "# ring exchange, every rank at once (send right, receive left): time per step, median of %d rounds (after %d untimed)\n", cfg.iters, cfg.warmup)
	fmt.Fprintf(&b, "#%12s %12s %12s %12s\n#%12s %12s %12s %12s\n", "size", "copy", "fit", "reduce", "(B)", "(us)", "(us)", "(us)")
	l := fit.Link
	for i, n := range sizes {
		red := "-"
		for j, m := range large {
			if m == n {
				red = fmt.Sprintf("%.2f", reduced[j]*1e6)
			}
		}
		fit := l.Alpha + float64(n)*l.Beta
		switch {
		case l.SmallBytes > 0 && n <= l.SmallBytes:
			fit = l.Alpha + float64(n)*l.SmallBeta
		case l.CacheBytes > 0 && n <= l.CacheBytes:
			fit = l.Alpha + float64(n)*l.CacheBeta
		}
		fmt.Fprintf(&b, "%13d %12.2f %12.2f %12s\n", n, perStep[i]*1e6, fit*1e6, red)
	}
	fmt.Fprintf(&b, "# alpha = %.3f us: median of (time - size*beta) over %s\n", l.Alpha*1e6, sizeRange(fit.AlphaSizes))
	fmt.Fprintf(&b, "# beta  = %.4g ns/B (%s): median of (time - smallest time) / (size - smallest size) over %s\n", l.Beta*1e9, calibrate.RateText(l.Beta), sizeRange(fit.BetaSizes))
	if l.CacheBytes > 0 {
		fmt.Fprintf(&b, "# cache regime: messages up to %s move at %.4g ns/B (%s): median of (time - alpha) / size over %s\n",
			bytesize.Format(l.CacheBytes), l.CacheBeta*1e9, calibrate.RateText(l.CacheBeta), sizeRange(fit.CacheSizes))
	} else {
		b.WriteString("# cache regime: none (no mid-sized message moved 1.5x faster per byte than the large ones)\n")
	}
	if l.SmallBytes > 0 {
		fmt.Fprintf(&b, "# small-message regime: messages up to %s move at %.4g ns/B (%s): median of (time - alpha) / size over %s\n",
			bytesize.Format(l.SmallBytes), l.SmallBeta*1e9, calibrate.RateText(l.SmallBeta), sizeRange(fit.SmallSizes))
	}
	fmt.Fprintf(&b, "# gamma = %.4g ns/B (%s): median extra time per byte of the reducing steps over %s (the kernel alone, float32 sum of %s: %.4g ns/B, %s)\n",
		gamma*1e9, calibrate.RateText(gamma), sizeRange(large), bytesize.Format(gbytes), kernel*1e9, calibrate.RateText(kernel))
	b.WriteString("# model: intra = inter = the link above (one host)\n#\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// sizeRange is "the sizes a..b (k sizes)".
func sizeRange(sizes []int) string {
	switch len(sizes) {
	case 0:
		return "no size"
	case 1:
		return "the size " + bytesize.Format(sizes[0])
	}
	return fmt.Sprintf("the %d sizes %s..%s", len(sizes), bytesize.Format(sizes[0]), bytesize.Format(sizes[len(sizes)-1]))
}

// printAccuracy sums up, per algorithm, how the measured times compare
// with the predicted ones (the ratio column).
func printAccuracy(w io.Writer, rows []row) error {
	var order []string
	ratios := map[string][]float64{}
	for _, r := range rows {
		if r.Ratio == nil {
			continue
		}
		if _, ok := ratios[r.Algo]; !ok {
			order = append(order, r.Algo)
		}
		ratios[r.Algo] = append(ratios[r.Algo], *r.Ratio)
	}
	var b strings.Builder
	b.WriteString("# measured / predicted, per algorithm over the sizes: median [min, max], sizes within 25%\n")
	calibrate.WriteRatios(&b, order, ratios)
	_, err := io.WriteString(w, b.String())
	return err
}

// calibRounds is how many times -calibrate sweeps every algorithm: 5, as
// with 3 a cell could rank two algorithms opposite to a longer measurement
// (docs/measurements.md has the case).
const calibRounds = 5

// medianRows merges rounds of the same sweep (the same rows in the same
// order): each row takes the median of its rounds' times, with its
// bandwidths and measured/predicted ratio recomputed from it, and the
// most wrong elements any round saw.
func medianRows(rounds [][]row) []row {
	if len(rounds) == 0 {
		return nil
	}
	out := make([]row, len(rounds[0]))
	for i, r := range rounds[0] {
		times := make([]float64, 0, len(rounds))
		for _, rs := range rounds {
			if i < len(rs) {
				times = append(times, rs[i].TimeUS)
				if rs[i].Wrong != nil && (r.Wrong == nil || *rs[i].Wrong > *r.Wrong) {
					r.Wrong = rs[i].Wrong
				}
			}
		}
		r.minUS = slices.Min(times)
		t := calibrate.Median(times)
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

// refitSamples are the rows of single algorithms (auto's rows repeat one
// of them) that have a shape and a positive time.
func refitSamples(rows []row) []calibrate.Sample {
	var out []calibrate.Sample
	for _, r := range rows {
		a, err := allreduce.ParseAlgorithm(r.Algo)
		if err != nil || a == allreduce.Auto || r.shape.Ranks == 0 || r.TimeUS <= 0 {
			continue
		}
		out = append(out, calibrate.NewSample(a, r.shape, r.Bytes, r.TimeUS*1e-6))
	}
	return out
}
