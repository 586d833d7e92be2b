package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// The refit: the ring exchange measures α, β and γ of one step with every
// rank busy, but an algorithm's steps pay more than the microbenchmark's
// back-to-back steps (a cold start after the barrier, the time between
// steps spent in the algorithm, wake-ups when ranks outnumber cores). So
// -calibrate then scales the fitted parameters to the algorithms'
// measured times: each of α, β, the cache regime's β and γ gets a factor
// 2^(k/8), k in [-24, 24], chosen by coordinate descent (refitRounds
// passes over the four) to minimise the mean squared log ratio of
// predicted to measured time over every measured algorithm and size. The
// log makes a 20 µs call and a 100 ms one count alike, which is what
// "within 25%" asks of the model. The factors and the error before and
// after are printed.
const (
	refitSteps  = 24
	refitRounds = 4
)

// refitSample is one measured all-reduce: an algorithm, its shape, bytes
// and measured seconds.
type refitSample struct {
	algo    allreduce.Algorithm
	shape   allreduce.Shape
	bytes   int
	seconds float64
}

// refitSamples are the rows of single algorithms (auto's rows repeat one
// of them) that have a shape and a positive time, Tree's left out: its
// formula is fitted to the simulator's schedule, not derived from the
// link, so it says little about the link's parameters (on loopback tcp,
// whose links do not share one egress port as the model's do, it
// predicts two to three times the measured time).
func refitSamples(rows []row) []refitSample {
	var out []refitSample
	for _, r := range rows {
		a, err := allreduce.ParseAlgorithm(r.Algo)
		if err != nil || a == allreduce.Auto || a == allreduce.Tree || r.shape.Ranks == 0 || r.TimeUS <= 0 {
			continue
		}
		out = append(out, refitSample{a, r.shape, r.Bytes, r.TimeUS * 1e-6})
	}
	return out
}

// refitError is the mean squared log ratio of m's predictions to the
// samples' times (+Inf if any prediction is missing or not positive).
func refitError(m allreduce.Model, samples []refitSample) float64 {
	sum := 0.0
	for _, s := range samples {
		pred := 0.0
		for _, p := range allreduce.Predict(m, s.shape, s.bytes) {
			if p.Algorithm == s.algo {
				pred = p.Seconds
			}
		}
		if !(pred > 0) {
			return math.Inf(1)
		}
		d := math.Log(pred / s.seconds)
		sum += d * d
	}
	return sum / float64(max(len(samples), 1))
}

// refitFactors are the scale factors of α, β, cache β and γ.
type refitFactors [4]float64

// apply scales m by f (intra and inter alike: one host).
func (f refitFactors) apply(m allreduce.Model) allreduce.Model {
	scale := func(l allreduce.Link) allreduce.Link {
		l.Alpha *= f[0]
		l.Beta *= f[1]
		l.CacheBeta *= f[2]
		return l
	}
	m.Intra, m.Inter = scale(m.Intra), scale(m.Inter)
	m.Gamma *= f[3]
	return m
}

// refitModel scales m to the samples (see the refit above) and returns the
// scaled model, the factors and the error before and after.
func refitModel(m allreduce.Model, samples []refitSample) (allreduce.Model, refitFactors, float64, float64) {
	f := refitFactors{1, 1, 1, 1}
	before := refitError(m, samples)
	best := before
	if len(samples) == 0 || math.IsInf(before, 1) {
		return m, f, before, before
	}
	for range refitRounds {
		for p := range f {
			if p == 2 && m.Intra.CacheBytes == 0 {
				continue // no cache regime to scale
			}
			base := f[p]
			for k := -refitSteps; k <= refitSteps; k++ {
				try := f
				try[p] = base * math.Exp2(float64(k)/8)
				if e := refitError(try.apply(m), samples); e < best {
					best, f = e, try
				}
			}
		}
	}
	return f.apply(m), f, before, best
}

// printRefit reports the refit's factors and errors, and the accuracy of
// the refitted model per algorithm.
func printRefit(w io.Writer, f refitFactors, before, after float64, m allreduce.Model, samples []refitSample) error {
	var b strings.Builder
	rms := func(e float64) string { return fmt.Sprintf("%.0f%%", 100*(math.Exp(math.Sqrt(e))-1)) }
	fmt.Fprintf(&b, "# refit to the algorithms' measured times: alpha x%.3g, beta x%.3g, cache beta x%.3g, gamma x%.3g; rms prediction error %s before, %s after\n",
		f[0], f[1], f[2], f[3], rms(before), rms(after))
	fmt.Fprintf(&b, "# model written: intra = inter: alpha %.3f us, beta %.4g ns/B (%s)", m.Intra.Alpha*1e6, m.Intra.Beta*1e9, rateText(m.Intra.Beta))
	if m.Intra.CacheBytes > 0 {
		fmt.Fprintf(&b, ", up to %s %.4g ns/B (%s)", allreducetest.FormatBytes(m.Intra.CacheBytes), m.Intra.CacheBeta*1e9, rateText(m.Intra.CacheBeta))
	}
	fmt.Fprintf(&b, "; gamma %.4g ns/B (%s)\n", m.Gamma*1e9, rateText(m.Gamma))
	b.WriteString("# measured / predicted by the refitted model, per algorithm: median [min, max], sizes within 25%\n")
	var order []string
	ratios := map[string][]float64{}
	for _, s := range samples {
		for _, p := range allreduce.Predict(m, s.shape, s.bytes) {
			if p.Algorithm == s.algo && p.Seconds > 0 {
				name := s.algo.String()
				if _, ok := ratios[name]; !ok {
					order = append(order, name)
				}
				ratios[name] = append(ratios[name], s.seconds/p.Seconds)
			}
		}
	}
	writeRatios(&b, order, ratios)
	_, err := io.WriteString(w, b.String())
	return err
}
