package main

import (
	"slices"

	"github.com/ringddp/ringddp/allreduce"
)

// The two regimes of the link fit (linkFit): messages of at most
// alphaRegime bytes give the latency, messages of at least betaRegime
// bytes the inverse bandwidth.
const (
	alphaRegime = 4 << 10
	betaRegime  = 1 << 20
)

// linkFit is a link fitted to ping-pong times, and the sizes each
// parameter came from.
type linkFit struct {
	link       allreduce.Link
	alphaSizes []int
	betaSizes  []int
}

// fitLink fits the cost model's link, t(b) = α + b·β, to the one-way
// times secs of messages of sizes bytes (ascending), in two regimes:
//
//   - β is the least-squares slope of t against b over the large messages
//     (≥ 1 MiB; if fewer than two, the larger half of the sizes). Only
//     there is the per-byte cost the bulk of the time, and a fit over
//     every size would let the many small messages, whose times are
//     mostly per-message overhead (and, on a real network, another
//     protocol than the large ones'), pull the slope, while the large
//     ones would pull the intercept far from any small message's time
//     (even below 0).
//   - α is the median, over the small messages (≤ 4 KiB; if none, the
//     smallest), of t − b·β: the latency the small-message algorithms
//     actually pay, which the large messages' intercept does not
//     measure.
//
// A slope that noise makes negative falls back to the median of t/b over
// the same messages; α is at least 0.
func fitLink(bytes []int, secs []float64) linkFit {
	var f linkFit
	n := len(bytes)
	if n == 0 {
		return f
	}
	var big []int // indices
	for i, b := range bytes {
		if b >= betaRegime {
			big = append(big, i)
		}
	}
	if len(big) < 2 {
		big = big[:0]
		for i := n / 2; i < n; i++ {
			big = append(big, i)
		}
	}
	f.link.Beta = slope(bytes, secs, big)
	if !(f.link.Beta > 0) {
		per := make([]float64, 0, len(big))
		for _, i := range big {
			if bytes[i] > 0 {
				per = append(per, secs[i]/float64(bytes[i]))
			}
		}
		f.link.Beta = 0
		if len(per) > 0 {
			f.link.Beta = median(per)
		}
	}
	var small []float64
	for i, b := range bytes {
		if b <= alphaRegime {
			small = append(small, secs[i]-float64(b)*f.link.Beta)
			f.alphaSizes = append(f.alphaSizes, b)
		}
	}
	if len(small) == 0 {
		small = []float64{secs[0] - float64(bytes[0])*f.link.Beta}
		f.alphaSizes = []int{bytes[0]}
	}
	f.link.Alpha = max(0, median(small))
	for _, i := range big {
		f.betaSizes = append(f.betaSizes, bytes[i])
	}
	return f
}

// slope is the least-squares slope of y against x over the indices idx
// (0 when it is undefined).
func slope(x []int, y []float64, idx []int) float64 {
	if len(idx) < 2 {
		if len(idx) == 1 && x[idx[0]] > 0 {
			return y[idx[0]] / float64(x[idx[0]])
		}
		return 0
	}
	var mx, my float64
	for _, i := range idx {
		mx += float64(x[i])
		my += y[i]
	}
	mx /= float64(len(idx))
	my /= float64(len(idx))
	var sxy, sxx float64
	for _, i := range idx {
		dx := float64(x[i]) - mx
		sxy += dx * (y[i] - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// medianOf is the median of xs without reordering them.
func medianOf(xs []float64) float64 {
	return median(slices.Clone(xs))
}
