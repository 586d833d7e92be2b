package calibrate

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// Predicted is the model's time for the algorithm named name (auto: the
// one it picks) at bytes on shape, false where it cannot run there.
func Predicted(m cost.Model, shape cost.Shape, name string, bytes int) (float64, bool) {
	a, err := allreduce.ParseAlgorithm(name)
	if err != nil {
		return 0, false
	}
	if a == allreduce.Auto {
		a = allreduce.Choose(m, shape, bytes)
	}
	s, ok := allreduce.PredictAlgorithm(m, shape, a, bytes)
	return s, ok && s > 0
}

// accuracy is one algorithm's accuracy over its sizes.
type accuracy struct {
	within, sizes int
	sumSquares    float64 // of the log ratios
}

// WriteComparison writes earlier runs' times against m's predictions on
// shape: times[algorithm][bytes] are the runs' times (seconds). For every
// size any of algos has, a line of each algorithm's cell: the median of
// its runs' times, the prediction, their ratio (marked when within
// WithinBand) and the range of the runs' ratios; then per algorithm how
// many sizes are within WithinBand and the rms of the log ratio, and the
// count over all cells.
func WriteComparison(w io.Writer, m cost.Model, shape cost.Shape, algos []string, times map[string]map[int][]float64) error {
	var sizes []int
	for _, a := range algos {
		for b := range times[a] {
			if !slices.Contains(sizes, b) {
				sizes = append(sizes, b)
			}
		}
	}
	sort.Ints(sizes)

	var b strings.Builder
	fmt.Fprintf(&b, "#%12s", "size (B)")
	for _, a := range algos {
		fmt.Fprintf(&b, "  %-34s", a)
	}
	b.WriteString("\n")
	results := map[string]*accuracy{}
	for _, a := range algos {
		results[a] = &accuracy{}
	}
	for _, bytes := range sizes {
		fmt.Fprintf(&b, "%13d", bytes)
		for _, a := range algos {
			fmt.Fprintf(&b, "  %-34s", compareCell(m, shape, a, bytes, times[a][bytes], results[a]))
		}
		b.WriteString("\n")
	}
	b.WriteString("#\n")
	total, cells := 0, 0
	for _, a := range algos {
		res := results[a]
		total, cells = total+res.within, cells+res.sizes
		rms := 0.0
		if res.sizes > 0 {
			rms = math.Sqrt(res.sumSquares / float64(res.sizes))
		}
		fmt.Fprintf(&b, "# %-12s within %.0f%%: %d of %d sizes; rms of the log ratio %.1f%%\n", a, WithinBand*100, res.within, res.sizes, 100*rms)
	}
	fmt.Fprintf(&b, "# all          within %.0f%%: %d of %d cells\n", WithinBand*100, total, cells)
	_, err := io.WriteString(w, b.String())
	return err
}

// compareCell is algorithm a's cell at bytes ("-" without runs or a
// prediction), counted into res.
func compareCell(m cost.Model, shape cost.Shape, a string, bytes int, times []float64, res *accuracy) string {
	pred, ok := Predicted(m, shape, a, bytes)
	if len(times) == 0 || !ok {
		return "-"
	}
	med := Median(times)
	ratio := med / pred
	lo, hi := slices.Min(times)/pred, slices.Max(times)/pred
	mark := " "
	res.sizes++
	res.sumSquares += math.Log(ratio) * math.Log(ratio)
	if WithinAccuracy(ratio) {
		res.within++
		mark = "*"
	}
	return fmt.Sprintf("%.0f / %.0f %.2f%s [%.2f-%.2f]", med*1e6, pred*1e6, ratio, mark, lo, hi)
}
