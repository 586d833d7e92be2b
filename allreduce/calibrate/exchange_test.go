package calibrate

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestGamma: γ is fitted at the sizes of 1 MiB and more (the largest
// alone when none is that large), as the median extra time per byte of
// the reducing steps, and is the kernel's where no step was slower.
func TestGamma(t *testing.T) {
	if got := LargeSizes([]int{1 << 10, 1 << 20, 4 << 20}); !slices.Equal(got, []int{1 << 20, 4 << 20}) {
		t.Errorf("large sizes %v", got)
	}
	if got := LargeSizes([]int{8, 64}); !slices.Equal(got, []int{64}) {
		t.Errorf("large sizes of small ones %v", got)
	}
	sizes, perStep := []int{1000, 2000, 4000}, []float64{1, 2, 4}
	if g := FitGamma(sizes, perStep, []int{2000, 4000}, []float64{3, 6}, 7); math.Abs(g-(0.5e-3+0.5e-3)/2) > 1e-15 {
		t.Errorf("gamma %v", g)
	}
	if g := FitGamma(sizes, perStep, []int{4000}, []float64{4}, 7); g != 7 {
		t.Errorf("gamma with no slower step %v, want the kernel's 7", g)
	}
}

// TestWriteExchange: the report has the table of the exchange (the
// reducing time only at the large sizes) and the fitted parameters.
func TestWriteExchange(t *testing.T) {
	e := Exchange{Transport: "inproc", Ranks: 3, Iters: 2, Warmup: 1,
		Sizes: []int{1024, 1 << 20}, PerStep: []float64{2e-6, 100e-6},
		Fit:   LinkFit{Link: cost.Link{Alpha: 1e-6, Beta: 1e-10}, AlphaSizes: []int{1024}, BetaSizes: []int{1024, 1 << 20}},
		Large: []int{1 << 20}, Reduced: []float64{150e-6}, Gamma: 5e-11, Kernel: 4e-11, KernelBytes: 1 << 20}
	var b strings.Builder
	if err := WriteExchange(&b, e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# ringddp bench -calibrate: transport inproc, ranks 3\n",
		"median of 2 rounds (after 1 untimed)",
		"         1024         2.00         1.10            -\n",
		"      1048576       100.00       105.86       150.00\n",
		"# alpha = 1.000 us: median of (time - size*beta) over the size 1KiB\n",
		"over the 2 sizes 1KiB..1MiB\n",
		"# cache regime: none",
		"# gamma = 0.05 ns/B",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
