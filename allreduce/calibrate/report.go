package calibrate

import (
	"fmt"
	"slices"
	"strings"
)

// Texts the calibration's reports and cmd/bench share.

// GbpsOfBeta is the rate in gigabits per second of beta seconds per byte.
func GbpsOfBeta(beta float64) float64 { return 8 / (beta * 1e9) }

// RateText is beta seconds per byte as Gb/s and GB/s.
func RateText(beta float64) string {
	if beta == 0 {
		return "∞ Gb/s"
	}
	return fmt.Sprintf("%.4g Gb/s (%.4g GB/s)", GbpsOfBeta(beta), 1/beta/1e9)
}

// Median is the median of xs, which it sorts.
func Median(xs []float64) float64 {
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// WithinBand is the accuracy the issue asks of a prediction: the measured
// time within 25% of it.
const WithinBand = 0.25

// WithinAccuracy reports whether a measured/predicted ratio is within
// WithinBand (-compare's and -calibrate's counts).
func WithinAccuracy(ratio float64) bool {
	return ratio >= 1-WithinBand && ratio <= 1+WithinBand
}

// WriteRatios writes one line per algorithm (in order) of its measured /
// predicted ratios over the sizes: median, range, and how many within 25%.
func WriteRatios(b *strings.Builder, order []string, ratios map[string][]float64) {
	for _, a := range order {
		rs := ratios[a]
		lo, hi, within := rs[0], rs[0], 0
		for _, x := range rs {
			lo, hi = min(lo, x), max(hi, x)
			if WithinAccuracy(x) {
				within++
			}
		}
		fmt.Fprintf(b, "#   %-12s %6.2f [%.2f, %.2f]  %d/%d\n", a, MedianOf(rs), lo, hi, within, len(rs))
	}
}
