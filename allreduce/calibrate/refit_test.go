package calibrate

import (
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/shm"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
)

// profileSamples are a stored profile's measurements as refit samples, on
// the shape the profile's ranks had: one node; in process they share
// memory, over shm they lend copies, over tcp and shm they know their
// node (the host).
func profileSamples(t *testing.T, p cost.Profile) []Sample {
	t.Helper()
	shape := cost.FlatShape(p.Ranks)
	shape.PeerMemory = p.Transport == "inproc" || p.Transport == "shm"
	if p.Transport == "shm" {
		shape.LendLimit = shm.ExposeLimit
	}
	shape.Topology = p.Transport != "inproc"
	var out []Sample
	for _, m := range p.Measurements {
		if m.Collective != "" {
			continue // broadcast's and reduce's: the refit fits all-reduce
		}
		a, err := allreduce.ParseAlgorithm(m.Algorithm)
		if err != nil {
			t.Fatal(err)
		}
		if a != allreduce.Auto && m.Seconds > 0 {
			out = append(out, Sample{a, shape, m.Bytes, m.Seconds})
		}
	}
	return out
}

// TestRefitProfiles refits the model of every profile in
// allreduce/testdata/profiles to its stored measurements and prints the
// report; with RINGDDP_REFIT_PROFILES=1 it writes the refitted models
// back (the measurements unchanged): how the profiles' models were
// re-derived when the model gained Ports, the small-message regime and
// ExchangeWork. Without it, it checks that the stored models are a fixed
// point of the refit's descent (descending again gains nothing).
func TestRefitProfiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "allreduce", "testdata", "profiles", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no profiles: %v", err)
	}
	write := os.Getenv("RINGDDP_REFIT_PROFILES") == "1"
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := cost.ReadProfile(f, allreduce.KnownMeasurement)
			if err != nil {
				t.Fatal(err)
			}
			samples := profileSamples(t, p)
			if !write {
				// The check: the stored model is a fixed point of the
				// refit's descent (a full refit, with its searches over
				// the regimes and the starts of ExchangeWork, takes over a
				// minute for tcp-4, many under -race).
				before := refitError(p.Model, samples)
				if _, after := refitDescend(p.Model, before, samples, refitMoves(p.Ranks-1)); after < before*(1-1e-6) {
					t.Errorf("the stored model is not refitted: rms log error %.4g, %.4g after a refit (RINGDDP_REFIT_PROFILES=1 writes it)", before, after)
				}
				return
			}
			m, before, after := refitModel(p.Model, samples)
			m, after, choiceNote := RefitForChoices(m, after, samples) // as -calibrate does
			if choiceNote != "" {
				t.Log(choiceNote)
			}
			var b strings.Builder
			if err := PrintRefit(&b, before, after, m, samples); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s:\n%s", f, b.String())
			p.Model = m
			if err := cost.WriteProfile(f, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRefitRecovers: samples made by a known model with overlapping sends
// (Ports 2) and three regimes, refitted from a model that has neither,
// give a model that predicts them (rms log error under 2%) with its sends
// overlapping.
func TestRefitRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of fitting")
	}
	l := cost.Link{Alpha: 20e-6, Beta: 1e-9, CacheBeta: 5e-10, CacheBytes: 1 << 20, SmallBeta: 1e-10, SmallBytes: 32 << 10}
	truth := cost.Model{Intra: l, Inter: l, Gamma: 2e-10, Ports: 2}
	shape := cost.FlatShape(4)
	samples := predictedSamples(truth, shape, 2)
	start := truth
	start.Ports = 0
	start.Intra = cost.Link{Alpha: l.Alpha, Beta: l.Beta}
	start.Inter = start.Intra
	m, before, after := refitModel(start, samples)
	if !(after < before) || after > 0.02*0.02 || m.Ports < 2 {
		t.Errorf("refit %+v: mean squared log error %.3g before, %.3g after", m, before, after)
	}
}

// The refit recovers the model's factors from samples a known model made,
// starting from the same model without the factor (to the refit's step of
// 2^(1/8), and a model that predicts them within 2%):
//   - ExchangeWork 0.7: the cores bound prices a pairwise exchange's bytes
//     at 0.7 of a one-way byte's; without the cores bound the refit leaves
//     the factor alone (it prices nothing there);
//   - LoneAlpha 0.6: Tree's rounds that only send tell it from the ring's
//     and hd's exchanges at the small sizes.
func TestRefitRecoversFactors(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of fitting")
	}
	if raceEnabled {
		t.Skip("single-goroutine fitting, nothing to race: run by the plain go test")
	}
	l := cost.Link{Alpha: 20e-6, Beta: 1e-9}
	shape := cost.FlatShape(4)
	for _, c := range []struct {
		name  string
		truth cost.Model
		get   func(cost.Model) float64
		clear func(*cost.Model)
	}{
		{"exchange work", cost.Model{Intra: l, Inter: l, Gamma: 2e-10, Cores: 2, ExchangeWork: 0.7},
			exchangeWork, func(m *cost.Model) { m.ExchangeWork = 0 }},
		{"lone alpha", cost.Model{Intra: l, Inter: l, Gamma: 2e-10, Ports: 2, LoneAlpha: 0.6},
			loneAlpha, func(m *cost.Model) { m.LoneAlpha = 0 }},
	} {
		samples := predictedSamples(c.truth, shape, 4)
		start := c.truth
		c.clear(&start)
		m, before, after := refitModel(start, samples)
		if want := c.get(c.truth); !(after < before) || after > 0.02*0.02 || math.Abs(math.Log2(c.get(m)/want)) > 1.0/8+1e-9 {
			t.Errorf("%s: refit %+v: %.3g (want %.3g), mean squared log error %.3g before, %.3g after", c.name, m, c.get(m), want, before, after)
		}
		if c.truth.Cores > 0 {
			start.Cores = 0
			if m, _, _ := refitModel(start, samples); m.ExchangeWork != 0 {
				t.Errorf("%s: without the cores bound the refit set exchange work to %g", c.name, m.ExchangeWork)
			}
		}
	}
}

// The refit finds the cache-work regime (cost.Model.CacheWork up to
// CacheWorkBytes) from samples a model with 0.75 up to 8 MiB made,
// starting from none: the size exactly, the factor to its step (2^(1/8)),
// the samples to 2% (γ and the factor trade on the steps' grid); without
// the cores bound it leaves it alone.
func TestRefitRecoversCacheWork(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of fitting")
	}
	if raceEnabled {
		t.Skip("single-goroutine fitting, nothing to race: run by the plain go test")
	}
	l := cost.Link{Alpha: 20e-6, Beta: 1e-9}
	truth := cost.Model{Intra: l, Inter: l, Gamma: 2e-10, Ports: 2, Cores: 2, CacheWork: 0.75, CacheWorkBytes: 8 << 20}
	shape := cost.FlatShape(4)
	samples := predictedSamples(truth, shape, 2)
	start := truth
	start.CacheWork, start.CacheWorkBytes = 0, 0
	m, before, after := refitModel(start, samples)
	if !(after < before) || after > 0.02*0.02 || m.CacheWorkBytes != 8<<20 || math.Abs(math.Log2(m.CacheWork/0.75)) > 1.0/8+1e-9 {
		t.Errorf("refit %+v: cache work %.3g up to %d bytes (want 0.75 up to 8 MiB), mean squared log error %.3g before, %.3g after", m, m.CacheWork, m.CacheWorkBytes, before, after)
	}
	start.Cores = 0
	if m, _, _ := refitModel(start, samples); m.CacheWorkBytes != 0 {
		t.Errorf("without the cores bound the refit set a cache-work regime up to %d bytes", m.CacheWorkBytes)
	}
}

// predictedSamples are refit samples made by model truth on shape: ring,
// doubling, Tree and halving-doubling at 4 KiB to 64 MiB, each size factor
// times the last.
func predictedSamples(truth cost.Model, shape cost.Shape, factor int) []Sample {
	var samples []Sample
	for _, a := range []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.Tree, allreduce.HalvingDoubling} {
		for b := 4 << 10; b <= 64<<20; b *= factor {
			s, _ := allreduce.PredictAlgorithm(truth, shape, a, b)
			samples = append(samples, Sample{a, shape, b, s})
		}
	}
	return samples
}

// A size regime must move bytes faster than the one above it, and at most
// maxRegimeSpeedup times faster.
func TestRegimesOrdered(t *testing.T) {
	for _, c := range []struct {
		l    cost.Link
		want bool
	}{
		{cost.Link{Beta: 1e-9}, true},
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 5e-10}, true},
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 1e-9}, false},                                        // not faster
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 1e-9 / 16}, true},                                    // 16 times
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 1e-9 / 17}, false},                                   // past the bound
		{cost.Link{Beta: 1e-9, SmallBytes: 8 << 10, SmallBeta: 1e-14}, false},                                       // 100,000 times
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 5e-10, SmallBytes: 8 << 10, SmallBeta: 1e-10}, true}, // 5 times the cache regime
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 5e-10, SmallBytes: 8 << 10, SmallBeta: 6e-10}, false},
		{cost.Link{Beta: 1e-9, CacheBytes: 1 << 20, CacheBeta: 5e-10, SmallBytes: 8 << 10, SmallBeta: 1e-11}, false},
	} {
		if got := regimesOrdered(c.l); got != c.want {
			t.Errorf("regimesOrdered(%+v) = %v, want %v", c.l, got, c.want)
		}
	}
}
