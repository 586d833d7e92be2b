package calibrate

import (
	"math"
	"slices"
	"testing"
)

// TestFitLink: the two-regime fit recovers α and β from exact times, and
// the large messages alone set β whatever the small ones do.
func TestFitLink(t *testing.T) {
	const alpha, beta = 5e-6, 1e-9
	sizes := PingSizes(64 << 20)
	secs := make([]float64, len(sizes))
	for i, b := range sizes {
		secs[i] = alpha + float64(b)*beta
		if b <= 4<<10 {
			secs[i] += 1e-7 * float64(i%2) // noise in the latency regime
		}
	}
	f := FitLink(sizes, secs)
	if math.Abs(f.Link.Beta-beta) > 1e-6*beta || math.Abs(f.Link.Alpha-alpha) > 0.05*alpha {
		t.Errorf("fit %+v, want α %v, β %v", f.Link, alpha, beta)
	}
	if f.BetaSizes[0] != 1<<20 || f.AlphaSizes[len(f.AlphaSizes)-1] != 4<<10 {
		t.Errorf("regimes: α over %v, β over %v", f.AlphaSizes, f.BetaSizes)
	}
	// Tiny sweeps: the larger half sets β.
	f = FitLink([]int{8, 16, 32, 64}, []float64{1e-6, 1e-6, 2e-6, 3e-6})
	if !(f.Link.Beta > 0) || !slices.Equal(f.BetaSizes, []int{32, 64}) {
		t.Errorf("tiny fit %+v", f)
	}
}

// TestFitLinkRegimes: times with a small-message regime (up to 32 KiB, a
// tenth of β) below a cache regime (up to 512 KiB, half of β) give all
// three back, each from its own sizes.
func TestFitLinkRegimes(t *testing.T) {
	const alpha, beta = 20e-6, 1e-9
	sizes := PingSizes(64 << 20)
	secs := make([]float64, len(sizes))
	for i, b := range sizes {
		per := beta
		switch {
		case b <= 32<<10:
			per = beta / 10
		case b <= 512<<10:
			per = beta / 2
		}
		secs[i] = alpha + float64(b)*per
	}
	f := FitLink(sizes, secs)
	l := f.Link
	if l.SmallBytes != 32<<10 || l.CacheBytes != 512<<10 ||
		math.Abs(l.SmallBeta-beta/10) > 0.01*beta || math.Abs(l.CacheBeta-beta/2) > 0.01*beta || math.Abs(l.Beta-beta) > 0.01*beta {
		t.Errorf("fit %+v, want small regime to 32 KiB at β/10, cache regime to 512 KiB at β/2, β %v", l, beta)
	}
	// Two regimes only: no small-message regime is split off.
	for i, b := range sizes {
		per := beta
		if b <= 512<<10 {
			per = beta / 2
		}
		secs[i] = alpha + float64(b)*per
	}
	if f := FitLink(sizes, secs); f.Link.SmallBytes != 0 || f.Link.CacheBytes != 512<<10 {
		t.Errorf("two-regime fit %+v", f.Link)
	}
}
