package main

import (
	"slices"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// The two regimes of the link fit (linkFit): messages of at most
// alphaRegime bytes give the latency, messages of at least betaRegime
// bytes the inverse bandwidth.
const (
	alphaRegime = 4 << 10
	betaRegime  = 1 << 20
)

// linkFit is a link fitted to ring-exchange times, and the sizes each
// parameter came from.
type linkFit struct {
	link       cost.Link
	alphaSizes []int
	betaSizes  []int
	cacheSizes []int // the sizes the cache regime was fitted on (none: no such regime)
	smallSizes []int // the sizes the small-message regime was fitted on (none: no such regime)
}

// fitLink fits the cost model's link, t(b) = α + b·β, to the one-way
// times secs of messages of sizes bytes (ascending), in up to three
// regimes of message size:
//
//   - β is the median of t/b over the large messages (≥ 1 MiB; if fewer
//     than two, the larger half of the sizes). Only there is the per-byte
//     cost the bulk of the time; a fit over every size would let the many
//     small messages, whose times are mostly per-message overhead, pull
//     it. The median, not a least-squares slope: a slope follows the
//     largest message, which is the one most likely to be off the line
//     (in process, a message that no longer fits a cache moves at a
//     third of the speed of the others).
//   - α is the median, over the small messages (≤ 4 KiB; if none, the
//     smallest), of t − b·β: the latency the small-message algorithms
//     actually pay, which the large messages' intercept does not
//     measure.
//   - the cache regime and, below it, the small-message regime, where the
//     mid-sized messages show them (fitCache, fitSmall); α is then taken
//     again with the small messages' bytes at their regime's rate, and
//     the regimes from it.
//
// α is at least 0.
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
	// β from the large messages less a first estimate of α (the smallest
	// message's time), then α from the small ones less their bytes' β.
	per := make([]float64, 0, len(big))
	for _, i := range big {
		if bytes[i] > 0 {
			per = append(per, (secs[i]-secs[0])/float64(bytes[i]-bytes[0]))
		}
	}
	if len(per) > 0 {
		f.link.Beta = median(per)
	}
	if !(f.link.Beta > 0) { // noise larger than the bytes' time (tiny sweeps)
		per = per[:0]
		for _, i := range big {
			per = append(per, secs[i]/float64(max(bytes[i], 1)))
		}
		f.link.Beta = median(per)
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
	f.fitCache(bytes, secs)
	f.fitSmall(bytes, secs)
	if f.link.CacheBytes > 0 {
		// α again, less the small messages' bytes at their own regime's
		// rate, and the regimes again from it.
		small = small[:0]
		for i, b := range bytes {
			if slices.Contains(f.alphaSizes, b) {
				small = append(small, secs[i]-linkTransfer(f.link, b))
			}
		}
		f.link.Alpha = max(0, median(small))
		f.link.CacheBeta, f.link.CacheBytes, f.link.SmallBeta, f.link.SmallBytes = 0, 0, 0, 0
		f.cacheSizes, f.smallSizes = nil, nil
		f.fitCache(bytes, secs)
		f.fitSmall(bytes, secs)
	}
	return f
}

// linkTransfer is the per-byte part of a message of b bytes over l, in
// the regime it falls in (cost.Link's own is unexported).
func linkTransfer(l cost.Link, b int) float64 {
	switch {
	case l.SmallBytes > 0 && b <= l.SmallBytes:
		return float64(b) * l.SmallBeta
	case l.CacheBytes > 0 && b <= l.CacheBytes:
		return float64(b) * l.CacheBeta
	}
	return float64(b) * l.Beta
}

// cacheSpeedup is how much faster per byte than the large messages the
// mid-sized ones must move to count as a regime of their own.
const cacheSpeedup = 1.5

// fitCache fits the cache regime (cost.Link's CacheBeta and
// CacheBytes): the mid-sized messages (between the α and β regimes),
// from the smallest up, whose time per byte beyond α is at most
// 1/cacheSpeedup of β; CacheBytes is the largest of them and CacheBeta
// the median of their times per byte. In process they are the messages
// that fit the caches; none qualify on a link whose per-byte cost does not
// depend on the size.
func (f *linkFit) fitCache(bytes []int, secs []float64) {
	var per []float64
	for i, b := range bytes {
		if b <= alphaRegime || b >= betaRegime {
			continue
		}
		x := (secs[i] - f.link.Alpha) / float64(b)
		if x*cacheSpeedup > f.link.Beta {
			break
		}
		per = append(per, max(x, 0))
		f.cacheSizes = append(f.cacheSizes, b)
	}
	if len(per) == 0 {
		return
	}
	f.link.CacheBeta = median(per)
	f.link.CacheBytes = f.cacheSizes[len(f.cacheSizes)-1]
}

// medianOf is the median of xs without reordering them.
func medianOf(xs []float64) float64 {
	return median(slices.Clone(xs))
}

// fitSmall splits the small-message regime (cost.Link's SmallBeta
// and SmallBytes) off the cache regime: the longest run of the cache
// regime's sizes, from the smallest up and leaving at least one, whose
// times per byte beyond α are all at most 1/cacheSpeedup of the median of
// the rest. SmallBeta is their median, CacheBeta becomes the rest's. On
// loopback tcp they are the messages that fit the socket buffers; a link
// whose mid-sized messages all move alike has none.
func (f *linkFit) fitSmall(bytes []int, secs []float64) {
	if len(f.cacheSizes) < 2 {
		return
	}
	per := make([]float64, 0, len(f.cacheSizes))
	for i, b := range bytes {
		if slices.Contains(f.cacheSizes, b) {
			per = append(per, max((secs[i]-f.link.Alpha)/float64(b), 0))
		}
	}
	split := 0
	for k := 1; k < len(per); k++ {
		if slices.Max(per[:k])*cacheSpeedup <= medianOf(per[k:]) {
			split = k
		}
	}
	if split == 0 {
		return
	}
	f.smallSizes = f.cacheSizes[:split]
	f.cacheSizes = f.cacheSizes[split:]
	f.link.SmallBeta = medianOf(per[:split])
	f.link.SmallBytes = f.smallSizes[split-1]
	f.link.CacheBeta = medianOf(per[split:])
}
