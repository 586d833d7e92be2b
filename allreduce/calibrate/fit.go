package calibrate

import (
	"math"
	"slices"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// The two regimes of the link fit (LinkFit): messages of at most
// alphaRegime bytes give the latency, messages of at least betaRegime
// bytes the inverse bandwidth.
const (
	alphaRegime = 4 << 10
	betaRegime  = 1 << 20
)

// LinkFit is a link fitted to ring-exchange times, and the sizes each
// parameter came from.
type LinkFit struct {
	Link       cost.Link
	AlphaSizes []int
	BetaSizes  []int
	CacheSizes []int // the sizes the cache regime was fitted on (none: no such regime)
	SmallSizes []int // the sizes the small-message regime was fitted on (none: no such regime)
}

// FitLink fits the cost model's link, t(b) = α + b·β, to the one-way
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
func FitLink(bytes []int, secs []float64) LinkFit {
	var f LinkFit
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
		f.Link.Beta = Median(per)
	}
	if !(f.Link.Beta > 0) { // noise larger than the bytes' time (tiny sweeps)
		per = per[:0]
		for _, i := range big {
			per = append(per, secs[i]/float64(max(bytes[i], 1)))
		}
		f.Link.Beta = Median(per)
	}
	var small []float64
	for i, b := range bytes {
		if b <= alphaRegime {
			small = append(small, secs[i]-float64(b)*f.Link.Beta)
			f.AlphaSizes = append(f.AlphaSizes, b)
		}
	}
	if len(small) == 0 {
		small = []float64{secs[0] - float64(bytes[0])*f.Link.Beta}
		f.AlphaSizes = []int{bytes[0]}
	}
	f.Link.Alpha = max(0, Median(small))
	for _, i := range big {
		f.BetaSizes = append(f.BetaSizes, bytes[i])
	}
	f.fitCache(bytes, secs)
	f.fitSmall(bytes, secs)
	if f.Link.CacheBytes > 0 {
		// α again, less the small messages' bytes at their own regime's
		// rate, and the regimes again from it.
		small = small[:0]
		for i, b := range bytes {
			if slices.Contains(f.AlphaSizes, b) {
				small = append(small, secs[i]-linkTransfer(f.Link, b))
			}
		}
		f.Link.Alpha = max(0, Median(small))
		f.Link.CacheBeta, f.Link.CacheBytes, f.Link.SmallBeta, f.Link.SmallBytes = 0, 0, 0, 0
		f.CacheSizes, f.SmallSizes = nil, nil
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
func (f *LinkFit) fitCache(bytes []int, secs []float64) {
	var per []float64
	for i, b := range bytes {
		if b <= alphaRegime || b >= betaRegime {
			continue
		}
		x := (secs[i] - f.Link.Alpha) / float64(b)
		if x*cacheSpeedup > f.Link.Beta {
			break
		}
		per = append(per, max(x, 0))
		f.CacheSizes = append(f.CacheSizes, b)
	}
	if len(per) == 0 {
		return
	}
	f.Link.CacheBeta = Median(per)
	f.Link.CacheBytes = f.CacheSizes[len(f.CacheSizes)-1]
}

// MedianOf is the median of xs without reordering them.
func MedianOf(xs []float64) float64 {
	return Median(slices.Clone(xs))
}

// fitSmall splits the small-message regime (cost.Link's SmallBeta
// and SmallBytes) off the cache regime: the longest run of the cache
// regime's sizes, from the smallest up and leaving at least one, whose
// times per byte beyond α are all at most 1/cacheSpeedup of the median of
// the rest. SmallBeta is their median, CacheBeta becomes the rest's. On
// loopback tcp they are the messages that fit the socket buffers; a link
// whose mid-sized messages all move alike has none.
func (f *LinkFit) fitSmall(bytes []int, secs []float64) {
	if len(f.CacheSizes) < 2 {
		return
	}
	per := make([]float64, 0, len(f.CacheSizes))
	for i, b := range bytes {
		if slices.Contains(f.CacheSizes, b) {
			per = append(per, max((secs[i]-f.Link.Alpha)/float64(b), 0))
		}
	}
	split := 0
	for k := 1; k < len(per); k++ {
		if slices.Max(per[:k])*cacheSpeedup <= MedianOf(per[k:]) {
			split = k
		}
	}
	if split == 0 {
		return
	}
	f.SmallSizes = f.CacheSizes[:split]
	f.CacheSizes = f.CacheSizes[split:]
	f.Link.SmallBeta = MedianOf(per[:split])
	f.Link.SmallBytes = f.SmallSizes[split-1]
	f.Link.CacheBeta = MedianOf(per[split:])
}

// PingSizes are the ping-pong's message sizes: 8 B doubling up to max.
func PingSizes(max int) []int {
	var out []int
	for b := 8; b <= max; b *= 2 {
		out = append(out, b)
		if b > math.MaxInt/2 {
			break
		}
	}
	return out
}
