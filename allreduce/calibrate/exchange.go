package calibrate

import (
	"fmt"
	"io"
	"strings"

	"github.com/ringddp/ringddp/internal/bytesize"
)

// LargeSizes are the sizes of at least 1 MiB, where the reducing ring
// exchange is timed to find γ (the smallest size when none is that large,
// as in tests' tiny calibrations).
func LargeSizes(sizes []int) []int {
	for i, n := range sizes {
		if n >= 1<<20 {
			return sizes[i:]
		}
	}
	return sizes[len(sizes)-1:]
}

// FitGamma is γ: the median over the large sizes of the extra time per
// byte a reducing ring step takes over a copying one, both with every
// rank at work; the reduce kernel's own time (kernel, one goroutine
// alone) where that difference is not positive. perStep is the copying
// step's time (seconds) at each of sizes, reduced the reducing step's at
// each of large.
func FitGamma(sizes []int, perStep []float64, large []int, reduced []float64, kernel float64) float64 {
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
	return Median(extra)
}

// An Exchange is what the ring exchange of a calibration measured and
// what was fitted to it: the report WriteExchange writes.
type Exchange struct {
	Transport     string // the transport measured
	Ranks         int    // how many ranks exchanged at once
	Iters, Warmup int    // timed and untimed rounds per size

	Sizes   []int     // the message sizes, ascending
	PerStep []float64 // the copying step's median time (seconds) at each of Sizes
	Fit     LinkFit   // the link fitted to PerStep (FitLink)
	Large   []int     // the sizes the reducing exchange was timed at (LargeSizes)
	Reduced []float64 // the reducing step's median time at each of Large

	Gamma       float64 // the fitted γ (FitGamma), seconds per byte
	Kernel      float64 // the reduce kernel alone, seconds per byte
	KernelBytes int     // the size the kernel was timed at

	// Ring says which ranks exchanged, Role which of the model's links
	// the fit is: both empty for one host's ring of every rank (the
	// model's intra and inter link alike); across nodes, the ring within
	// the nodes ("intra") or between them ("inter"), each fitted alone.
	Ring, Role string
}

// WriteExchange reports the ring exchange, the fitted link and γ.
func WriteExchange(w io.Writer, e Exchange) error {
	var b strings.Builder
	ring := e.Ring
	if ring == "" {
		ring = "every rank at once"
		fmt.Fprintf(&b, "# ringddp bench -calibrate: transport %s, ranks %d\n", e.Transport, e.Ranks)
	}
	fmt.Fprintf(&b, "# ring exchange, %s (send right, receive left): time per step, median of %d rounds (after %d untimed)\n", ring, e.Iters, e.Warmup)
	fmt.Fprintf(&b, "#%12s %12s %12s %12s\n#%12s %12s %12s %12s\n", "size", "copy", "fit", "reduce", "(B)", "(us)", "(us)", "(us)")
	l := e.Fit.Link
	for i, n := range e.Sizes {
		red := "-"
		for j, m := range e.Large {
			if m == n && j < len(e.Reduced) {
				red = fmt.Sprintf("%.2f", e.Reduced[j]*1e6)
			}
		}
		fit := l.Alpha + float64(n)*l.Beta
		switch {
		case l.SmallBytes > 0 && n <= l.SmallBytes:
			fit = l.Alpha + float64(n)*l.SmallBeta
		case l.CacheBytes > 0 && n <= l.CacheBytes:
			fit = l.Alpha + float64(n)*l.CacheBeta
		}
		fmt.Fprintf(&b, "%13d %12.2f %12.2f %12s\n", n, e.PerStep[i]*1e6, fit*1e6, red)
	}
	fmt.Fprintf(&b, "# alpha = %.3f us: median of (time - size*beta) over %s\n", l.Alpha*1e6, sizeRange(e.Fit.AlphaSizes))
	fmt.Fprintf(&b, "# beta  = %.4g ns/B (%s): median of (time - smallest time) / (size - smallest size) over %s\n", l.Beta*1e9, RateText(l.Beta), sizeRange(e.Fit.BetaSizes))
	if l.CacheBytes > 0 {
		fmt.Fprintf(&b, "# cache regime: messages up to %s move at %.4g ns/B (%s): median of (time - alpha) / size over %s\n",
			bytesize.Format(l.CacheBytes), l.CacheBeta*1e9, RateText(l.CacheBeta), sizeRange(e.Fit.CacheSizes))
	} else {
		b.WriteString("# cache regime: none (no mid-sized message moved 1.5x faster per byte than the large ones)\n")
	}
	if l.SmallBytes > 0 {
		fmt.Fprintf(&b, "# small-message regime: messages up to %s move at %.4g ns/B (%s): median of (time - alpha) / size over %s\n",
			bytesize.Format(l.SmallBytes), l.SmallBeta*1e9, RateText(l.SmallBeta), sizeRange(e.Fit.SmallSizes))
	}
	if len(e.Reduced) > 0 {
		fmt.Fprintf(&b, "# gamma = %.4g ns/B (%s): median extra time per byte of the reducing steps over %s (the kernel alone, float32 sum of %s: %.4g ns/B, %s)\n",
			e.Gamma*1e9, RateText(e.Gamma), sizeRange(e.Large), bytesize.Format(e.KernelBytes), e.Kernel*1e9, RateText(e.Kernel))
	}
	if e.Role == "" {
		b.WriteString("# model: intra = inter = the link above (one host)\n#\n")
	} else {
		fmt.Fprintf(&b, "# model: %s = the link above\n#\n", e.Role)
	}
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
