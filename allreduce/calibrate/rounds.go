package calibrate

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// A calibration sweeps every algorithm over the sizes several times, in
// rounds; a round is its cells' times (any one unit), in the same cells'
// order in every round. Each cell is reported as the median of its
// rounds, so that one round's noise does not decide a choice.

// CellMedians is, for each cell of rounds[0], the median and the minimum
// of its times over the rounds that have it.
func CellMedians(rounds [][]float64) (median, minimum []float64) {
	if len(rounds) == 0 {
		return nil, nil
	}
	median = make([]float64, len(rounds[0]))
	minimum = make([]float64, len(rounds[0]))
	for i := range rounds[0] {
		times := make([]float64, 0, len(rounds))
		for _, rs := range rounds {
			if i < len(rs) {
				times = append(times, rs[i])
			}
		}
		minimum[i] = slices.Min(times)
		median[i] = Median(times)
	}
	return median, minimum
}

// DriftLimit is how far apart the rounds' paces may be before WriteDrift
// warns. Each cell of -calibrate's tables is the median of its rounds,
// which hides a host whose speed moved while it measured: a neighbour's
// burst, or a congestion control that paces (under BBR, a calibration's
// first round of tcp all-reduces ran markedly faster than the others;
// docs/measurements.md). So the report gives each round's pace: the
// geometric mean, over the cells, of the round's time over the cell's
// median. A slowdown that holds from the first round on (BBR's, after the
// ring exchange) shows only against separate runs.
const DriftLimit = 1.2

// RoundPaces is each round's pace: exp(mean over cells of log(time /
// the cell's median over the rounds)). Cells without a positive time in
// every round are left out; nil when no cell is left.
func RoundPaces(rounds [][]float64) []float64 {
	if len(rounds) == 0 {
		return nil
	}
	sums := make([]float64, len(rounds))
	cells := 0
	for i := range rounds[0] {
		times := make([]float64, len(rounds))
		for r, rs := range rounds {
			if i >= len(rs) || !(rs[i] > 0) {
				times = nil
				break
			}
			times[r] = rs[i]
		}
		if times == nil {
			continue
		}
		med := MedianOf(times)
		for r, t := range times {
			sums[r] += math.Log(t / med)
		}
		cells++
	}
	if cells == 0 {
		return nil
	}
	for r := range sums {
		sums[r] = math.Exp(sums[r] / float64(cells))
	}
	return sums
}

// WriteDrift writes the rounds' paces (RoundPaces) as one line, and a
// warning when they differ by more than DriftLimit; nothing for fewer
// than two paces.
func WriteDrift(w io.Writer, rounds [][]float64) error {
	paces := RoundPaces(rounds)
	if len(paces) < 2 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# each round's times over the cells' medians (geometric mean):")
	for r, p := range paces {
		fmt.Fprintf(&b, " round %d %.2f", r, p)
	}
	b.WriteString("\n")
	if slices.Max(paces) > DriftLimit*slices.Min(paces) {
		fmt.Fprintf(&b, "# warning: the rounds' paces differ by %.2fx: the host's speed moved while measuring (another job, "+
			"or a congestion control that paces, as BBR: RINGDDP_TCP_CONGESTION, docs/multiprocess.md); calibrate again when it is steady\n",
			slices.Max(paces)/slices.Min(paces))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// A Timing is one cell of a calibration's all-reduce table: an
// algorithm's measured time at one size, and how it compares with the
// model's prediction.
type Timing struct {
	Algo    string     // the algorithm's name (allreduce.ParseAlgorithm's); auto's rows repeat one
	Bytes   int        // the all-reduced size
	Seconds float64    // the measured time (the rounds' median)
	Shape   cost.Shape // the group's shape the prediction was made for; zero when none
	Ratio   float64    // the measured time over the predicted one; NaN when none was predicted
}

// Samples are the timings of single algorithms (auto's repeat one of
// them) that have a shape and a positive time, as the refit's samples.
func Samples(ts []Timing) []Sample {
	var out []Sample
	for _, t := range ts {
		a, err := allreduce.ParseAlgorithm(t.Algo)
		if err != nil || a == allreduce.Auto || t.Shape.Ranks == 0 || t.Seconds <= 0 {
			continue
		}
		out = append(out, NewSample(a, t.Shape, t.Bytes, t.Seconds))
	}
	return out
}

// WriteAccuracy sums up, per algorithm, how the measured times compare
// with the predicted ones (the timings' ratios).
func WriteAccuracy(w io.Writer, ts []Timing) error {
	var order []string
	ratios := map[string][]float64{}
	for _, t := range ts {
		if math.IsNaN(t.Ratio) {
			continue
		}
		if _, ok := ratios[t.Algo]; !ok {
			order = append(order, t.Algo)
		}
		ratios[t.Algo] = append(ratios[t.Algo], t.Ratio)
	}
	var b strings.Builder
	b.WriteString("# measured / predicted, per algorithm over the sizes: median [min, max], sizes within 25%\n")
	WriteRatios(&b, order, ratios)
	_, err := io.WriteString(w, b.String())
	return err
}
