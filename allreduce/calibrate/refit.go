package calibrate

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// The refit: the ring exchange measures α, β and γ of one step with every
// rank busy, but an algorithm's steps pay more than the microbenchmark's
// back-to-back steps (a cold start after the barrier, the time between
// steps spent in the algorithm, wake-ups when ranks outnumber cores), and
// it cannot see how a rank's sends to several peers overlap. So
// -calibrate then fits the model to the algorithms' measured times, by
// coordinate descent (refitRounds passes) minimising the mean squared log
// ratio of predicted to measured time over every measured algorithm and
// size:
//
//   - α, β, each regime's β and γ are scaled by factors 2^(k/8), k in
//     [-24, 24];
//   - Ports (cost.Model) takes the value 0..N-1 that fits best: how
//     far a rank's sends to distinct peers overlap, which Tree (an
//     interior rank sends to three peers) shows;
//   - Cores stays as given: -calibrate refits with the host's cores and
//     with none (refitWithCores) and keeps the better fit;
//   - with Cores set, ExchangeWork (the work of a byte exchanged pairwise,
//     against one sent one way) is scaled by the same factors from 1:
//     what tells halving-doubling's and doubling's exchanges from the
//     ring's and Tree's one-way sends when the cores bound sets the time;
//   - with Cores set, the cache-work regime (CacheWork up to
//     CacheWorkBytes a rank: the work of a collective whose buffers fit
//     the caches) ends at one of 1…64 MiB, or none, its factor scaled by
//     the same factors;
//   - LoneAlpha (a lone send's α, against an exchange's) is scaled by the
//     same factors from 1: what tells Tree's rounds and the rooted
//     schedules' lone sends from the ring's and hd's exchanges where α
//     sets the time;
//   - the regimes' sizes move between powers of two from 8 KiB to 8 MiB
//     (or drop, 0): the cache regime's CacheBytes, and the small-message
//     regime's SmallBytes below it (loopback tcp: messages that fit the
//     socket buffers), a regime starting at the β of the one above it.
//
// Last, where the fitted model's Auto picks an algorithm measured more
// than 10% over the fastest at some size, the descent runs once more
// with its misrankings as a penalty (choicefit.go).
//
// The log makes a 20 µs call and a 100 ms one count alike, which is what
// "within 25%" asks of the model. The model and the error before and after
// are printed. The refit's parameters are few (at most 5 rates, 3 sizes,
// 3 factors and Ports) against the samples (every algorithm at every size: about
// 100), and the predictions are checked on a separate run (docs/scaling.md).
const (
	refitSteps  = 24
	refitRounds = 6
)

// Sample is one measured all-reduce: an algorithm, its shape, bytes
// and measured seconds.
type Sample struct {
	algo    allreduce.Algorithm
	shape   cost.Shape
	bytes   int
	seconds float64
}

// refitError is the mean squared log ratio of m's predictions to the
// samples' times (+Inf if any prediction is missing or not positive).
func refitError(m cost.Model, samples []Sample) float64 {
	sum := 0.0
	for _, s := range samples {
		pred, ok := allreduce.PredictAlgorithm(m, s.shape, s.algo, s.bytes)
		if !ok || !(pred > 0) {
			return math.Inf(1)
		}
		d := math.Log(pred / s.seconds)
		sum += d * d
	}
	return sum / float64(max(len(samples), 1))
}

// refitRegimeSizes are the sizes a regime may end at (0: no regime).
var refitRegimeSizes = func() []int {
	out := []int{0}
	for b := 8 << 10; b <= 8<<20; b <<= 1 {
		out = append(out, b)
	}
	return out
}()

// oneLink sets both links of m (one host) to l.
func oneLink(m cost.Model, l cost.Link) cost.Model {
	m.Intra, m.Inter = l, l
	return m
}

// refitMoves are the coordinate descent's moves from model m: each
// returns the candidates of one parameter.
func refitMoves(maxPorts int) []func(m cost.Model) []cost.Model {
	scale := func(set func(l *cost.Link, f float64), gamma bool) func(m cost.Model) []cost.Model {
		return func(m cost.Model) []cost.Model {
			var out []cost.Model
			for k := -refitSteps; k <= refitSteps; k++ {
				f := math.Exp2(float64(k) / 8)
				c := m
				if gamma {
					c.Gamma *= f
				} else {
					l := m.Intra
					set(&l, f)
					c = oneLink(c, l)
				}
				out = append(out, c)
			}
			return out
		}
	}
	return []func(m cost.Model) []cost.Model{
		scale(func(l *cost.Link, f float64) { l.Alpha *= f }, false),
		scale(func(l *cost.Link, f float64) { l.Beta *= f }, false),
		scale(func(l *cost.Link, f float64) { l.CacheBeta *= f }, false),
		scale(func(l *cost.Link, f float64) { l.SmallBeta *= f }, false),
		scale(nil, true),
		// an exchanged byte's work: without the cores bound it prices nothing
		factorMove(exchangeWork, func(m *cost.Model, v float64) { m.ExchangeWork = v }, true),
		cacheWorkMove,
		factorMove(loneAlpha, func(m *cost.Model, v float64) { m.LoneAlpha = v }, false), // a lone send's α
		func(m cost.Model) []cost.Model { // ports
			var out []cost.Model
			for k := 0; k <= maxPorts; k++ {
				c := m
				c.Ports = k
				out = append(out, c)
			}
			return out
		},
		// the cache regime's size and β, below any small-message regime
		regimeMove(func(l *cost.Link) (*int, *float64) { return &l.CacheBytes, &l.CacheBeta },
			func(l cost.Link) float64 { return l.Beta },
			func(l cost.Link, b int) bool { return l.SmallBytes < b }),
		// the small-message regime's size and β, below any cache regime
		regimeMove(func(l *cost.Link) (*int, *float64) { return &l.SmallBytes, &l.SmallBeta },
			func(l cost.Link) float64 {
				if l.CacheBytes > 0 {
					return l.CacheBeta
				}
				return l.Beta
			},
			func(l cost.Link, b int) bool { return l.CacheBytes == 0 || b < l.CacheBytes }),
	}
}

// regimesOrdered reports whether each of l's regimes moves bytes faster
// than the regime of larger messages above it, as a regime of its own
// must (the cache regime than β, the small-message regime than the cache
// regime, or β when there is none), and at most maxRegimeSpeedup times
// faster: a calibration of a few sizes, whose smallest messages take
// their α and next to nothing per byte, otherwise fits a regime at
// thousands of GB/s, where the regimes calibrations measured lie within a
// few times the one above (docs/measurements.md).
func regimesOrdered(l cost.Link) bool {
	faster := func(b, above float64) bool { return b < above && b*maxRegimeSpeedup >= above }
	above := l.Beta
	if l.CacheBytes > 0 {
		if !faster(l.CacheBeta, above) {
			return false
		}
		above = l.CacheBeta
	}
	return l.SmallBytes == 0 || faster(l.SmallBeta, above)
}

// maxRegimeSpeedup is how many times faster than the regime above it a
// size regime may move bytes (regimesOrdered).
const maxRegimeSpeedup = 16

// refitRegimes is the refit's search over the regimes' structure, which
// coordinate descent, one parameter at a time, does not leave once in a
// local optimum (a regime added at the β of the one above changes
// nothing, so it is never taken): for every pair of sizes the small-message
// and cache regimes may end at (either none), the three rates fitted
// together (two passes of a coarse scan of each), from the current ones or,
// for a regime m lacks, half the rate above it. It returns the best model
// and its error.
func refitRegimes(m cost.Model, samples []Sample) (cost.Model, float64) {
	best, bestErr := m, refitError(m, samples)
	for _, cache := range refitRegimeSizes {
		for _, small := range refitRegimeSizes {
			if cache > 0 && small >= cache {
				continue
			}
			l := m.Intra
			if l.CacheBytes == 0 || cache == 0 {
				l.CacheBeta = l.Beta / 2
			}
			if l.SmallBytes == 0 || small == 0 {
				l.SmallBeta = l.CacheBeta / 2
				if cache == 0 {
					l.SmallBeta = l.Beta / 2
				}
			}
			l.CacheBytes, l.SmallBytes = cache, small
			if cache == 0 {
				l.CacheBeta = 0
			}
			if small == 0 {
				l.SmallBeta = 0
			}
			c := oneLink(m, l)
			cErr := refitError(c, samples)
			rates := []func(l *cost.Link) *float64{
				func(l *cost.Link) *float64 { return &l.Beta },
				func(l *cost.Link) *float64 { return &l.CacheBeta },
				func(l *cost.Link) *float64 { return &l.SmallBeta },
			}
			for range 2 {
				for i, rate := range rates {
					if (i == 1 && cache == 0) || (i == 2 && small == 0) {
						continue
					}
					base := c.Intra
					for k := -refitSteps; k <= refitSteps; k += 2 {
						l := base
						*rate(&l) *= math.Exp2(float64(k) / 8)
						if !regimesOrdered(l) {
							continue
						}
						if e := refitError(oneLink(c, l), samples); e < cErr {
							c, cErr = oneLink(c, l), e
						}
					}
				}
			}
			if cErr < bestErr*(1-1e-9) && regimesOrdered(c.Intra) {
				best, bestErr = c, cErr
			}
		}
	}
	return best, bestErr
}

// refitModel fits m to the samples (see the refit above) and returns the
// fitted model and the error before and after.
func refitModel(m cost.Model, samples []Sample) (cost.Model, float64, float64) {
	before := refitError(m, samples)
	if len(samples) == 0 || math.IsInf(before, 1) {
		return m, before, before
	}
	moves := refitMoves(maxPortsOf(samples))
	fit := func(m cost.Model) (cost.Model, float64) {
		best := refitError(m, samples)
		if s, e := refitRegimes(m, samples); e < best {
			m, best = s, e
		}
		return refitDescend(m, best, samples, moves)
	}
	fitted, best := fit(m) // never worse than m: every step only lowers the error
	if m.Cores > 0 {
		// One parameter at a time, the descent cannot trade the work of
		// an exchanged byte against β and γ together (each alone worsens
		// some algorithm's fit), so it also starts from these.
		for _, x := range []float64{0.5, 0.7} {
			c := m
			c.ExchangeWork = x
			if c, e := fit(c); e < best*(1-1e-9) {
				fitted, best = c, e
			}
		}
		// Nor, once the regimes of message size have taken up what a
		// cache-work regime would price, add one: so it also starts from
		// m with the regime that fits best before the rest is refitted.
		if c := bestOf(cacheWorkMove(m), samples); c.CacheWorkBytes > 0 {
			if c, e := fit(c); e < best*(1-1e-9) {
				fitted, best = c, e
			}
		}
	}
	return fitted, before, best
}

// maxPortsOf is the most Ports the refit tries for samples: one fewer
// than their most ranks (a rank sends to at most N−1 peers at once).
func maxPortsOf(samples []Sample) int {
	k := 0
	for _, s := range samples {
		k = max(k, s.shape.Ranks-1)
	}
	return k
}

// bestOf is the candidate of least refit error (the first on a tie).
func bestOf(candidates []cost.Model, samples []Sample) cost.Model {
	var best cost.Model
	bestErr := math.Inf(1)
	for _, c := range candidates {
		if e := refitError(c, samples); e < bestErr {
			best, bestErr = c, e
		}
	}
	return best
}

// refitDescend is the refit's coordinate descent from model m of error
// e: refitRounds passes over the moves, each taking the best candidate
// that lowers the error. It returns the model and its error.
func refitDescend(m cost.Model, e float64, samples []Sample, moves []func(cost.Model) []cost.Model) (cost.Model, float64) {
	return descend(m, e, moves, func(c cost.Model) float64 { return refitError(c, samples) })
}

// descend is coordinate descent from model m of error e under errf:
// refitRounds passes over the moves, each taking the candidate that
// lowers errf the most so far (regimes out of order skipped).
func descend(m cost.Model, e float64, moves []func(cost.Model) []cost.Model, errf func(cost.Model) float64) (cost.Model, float64) {
	for range refitRounds {
		improved := false
		for _, move := range moves {
			for _, c := range move(m) {
				if !regimesOrdered(c.Intra) {
					continue
				}
				if ce := errf(c); ce < e*(1-1e-9) {
					e, m, improved = ce, c, true
				}
			}
		}
		if !improved {
			break
		}
	}
	return m, e
}

// RefitWithCores is -calibrate's refit: with m's Cores (the host's) and
// without the cores bound (cost.Work), keeping the one that fits
// the samples better, and a line saying so.
func RefitWithCores(m cost.Model, samples []Sample) (fitted cost.Model, before, after float64, note string) {
	fitted, before, after = refitModel(m, samples)
	if m.Cores <= 0 {
		return fitted, before, after, ""
	}
	none := m
	none.Cores = 0
	fitted0, _, after0 := refitModel(none, samples)
	kept := fmt.Sprintf("kept the bound of %d cores", m.Cores)
	note = fmt.Sprintf("# cores bound (cost.Model.Cores): refitted rms prediction error %s with %d cores, %s without: ",
		rmsText(after), m.Cores, rmsText(after0))
	if after0 < after {
		fitted, after, kept = fitted0, after0, "kept no bound"
	}
	return fitted, before, after, note + kept + "\n"
}

// rmsText is a mean squared log error as the typical factor off, in
// percent: exp(√e) − 1.
func rmsText(e float64) string { return fmt.Sprintf("%.0f%%", 100*(math.Exp(math.Sqrt(e))-1)) }

// PrintRefit reports the refit's model and errors, and the accuracy of
// the refitted model per algorithm.
func PrintRefit(w io.Writer, before, after float64, m cost.Model, samples []Sample) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# refit to the algorithms' measured times: rms prediction error %s before, %s after\n", rmsText(before), rmsText(after))
	fmt.Fprintf(&b, "# model written: intra = inter: alpha %.3f us, beta %.4g ns/B (%s)", m.Intra.Alpha*1e6, m.Intra.Beta*1e9, RateText(m.Intra.Beta))
	if m.Intra.CacheBytes > 0 {
		fmt.Fprintf(&b, ", up to %s %.4g ns/B (%s)", bytesize.Format(m.Intra.CacheBytes), m.Intra.CacheBeta*1e9, RateText(m.Intra.CacheBeta))
	}
	if m.Intra.SmallBytes > 0 {
		fmt.Fprintf(&b, ", up to %s %.4g ns/B (%s)", bytesize.Format(m.Intra.SmallBytes), m.Intra.SmallBeta*1e9, RateText(m.Intra.SmallBeta))
	}
	fmt.Fprintf(&b, "; gamma %.4g ns/B (%s); ports %d (%s); cores %d (%s)", m.Gamma*1e9, RateText(m.Gamma), m.Ports, portsText(m.Ports), m.Cores, coresText(m.Cores))
	if m.Cores > 0 {
		fmt.Fprintf(&b, "; exchange work %.3g (a byte exchanged pairwise, against one sent one way)", exchangeWork(m))
	}
	if m.Cores > 0 && m.CacheWorkBytes > 0 {
		fmt.Fprintf(&b, "; cache work %.3g up to %s a rank (the work of a collective whose buffers fit the caches)", m.CacheWork, bytesize.Format(m.CacheWorkBytes))
	}
	fmt.Fprintf(&b, "; lone alpha %.3g (a lone send's α, against an exchange's)", loneAlpha(m))
	b.WriteString("\n")
	b.WriteString("# measured / predicted by the refitted model, per algorithm: median [min, max], sizes within 25%\n")
	var order []string
	ratios := map[string][]float64{}
	for _, s := range samples {
		if p, ok := allreduce.PredictAlgorithm(m, s.shape, s.algo, s.bytes); ok && p > 0 {
			name := s.algo.String()
			if _, ok := ratios[name]; !ok {
				order = append(order, name)
			}
			ratios[name] = append(ratios[name], s.seconds/p)
		}
	}
	WriteRatios(&b, order, ratios)
	_, err := io.WriteString(w, b.String())
	return err
}

// exchangeWork is m's Model.ExchangeWork as it prices: unset is 1.
// factorMove is the move of one of the model's factors (get reads it, 1
// when unset; set sets it): the candidates scaled by 2^(k/8) around its
// value, none without the cores bound when needsCores (it prices nothing
// there).
func factorMove(get func(cost.Model) float64, set func(*cost.Model, float64), needsCores bool) func(cost.Model) []cost.Model {
	return func(m cost.Model) []cost.Model {
		if needsCores && m.Cores <= 0 {
			return nil
		}
		var out []cost.Model
		for k := -refitSteps; k <= refitSteps; k++ {
			c := m
			set(&c, get(m)*math.Exp2(float64(k)/8))
			out = append(out, c)
		}
		return out
	}
}

// cacheWorkMove is the candidates of the cache-work regime
// (Model.CacheWork, CacheWorkBytes), with the cores bound only (it prices
// nothing without): none, or each size it may end at (a power of two
// from 1 to 64 MiB per rank) with its factor scaled around the current
// one (1 when m has none).
func cacheWorkMove(m cost.Model) []cost.Model {
	if m.Cores <= 0 {
		return nil
	}
	none := m
	none.CacheWork, none.CacheWorkBytes = 0, 0
	out := []cost.Model{none}
	start := m.CacheWork
	if m.CacheWorkBytes == 0 || start <= 0 {
		start = 1
	}
	for b := 1 << 20; b <= 64<<20; b <<= 1 {
		for k := -refitSteps; k <= refitSteps; k++ {
			c := m
			c.CacheWorkBytes, c.CacheWork = b, start*math.Exp2(float64(k)/8)
			out = append(out, c)
		}
	}
	return out
}

// loneAlpha is m's LoneAlpha, 1 when unset.
func loneAlpha(m cost.Model) float64 {
	if m.LoneAlpha <= 0 {
		return 1
	}
	return m.LoneAlpha
}

func exchangeWork(m cost.Model) float64 {
	if m.ExchangeWork <= 0 {
		return 1
	}
	return m.ExchangeWork
}

// coresText says what a model's Cores means.
func coresText(k int) string {
	if k == 0 {
		return "no cores bound"
	}
	return fmt.Sprintf("a node's work takes at least its seconds / %d", k)
}

// portsText says what a model's Ports means.
func portsText(k int) string {
	switch k {
	case 0:
		return "a send holds its rank"
	case 1:
		return "one send on the wire at a time, the rank going on"
	}
	return fmt.Sprintf("up to %d sends to distinct peers on the wire at once, the rank going on", k)
}

// regimeMove is the coordinate descent's move of one size regime of the
// link: every size b of refitRegimeSizes that fits(l, b) allows, the
// regime's β scaled refitSteps steps of 2^(1/8) each way (b = 0: no
// regime). field is the regime's size and β in a link; start is the β a
// regime the link does not have yet starts from.
func regimeMove(field func(l *cost.Link) (*int, *float64), start func(l cost.Link) float64,
	fits func(l cost.Link, b int) bool) func(m cost.Model) []cost.Model {
	return func(m cost.Model) []cost.Model {
		var out []cost.Model
		for _, b := range refitRegimeSizes {
			l := m.Intra
			size, beta := field(&l)
			if *size == 0 {
				*beta = start(l)
			}
			if b > 0 && !fits(l, b) {
				continue
			}
			*size = b
			if b == 0 {
				*beta = 0
				out = append(out, oneLink(m, l))
				continue
			}
			for k := -refitSteps; k <= refitSteps; k++ {
				c := l
				_, cb := field(&c)
				*cb *= math.Exp2(float64(k) / 8)
				out = append(out, oneLink(m, c))
			}
		}
		return out
	}
}

// NewSample is a measured all-reduce of algorithm a on shape s: bytes
// per rank, its measured seconds.
func NewSample(a allreduce.Algorithm, s cost.Shape, bytes int, seconds float64) Sample {
	return Sample{a, s, bytes, seconds}
}
