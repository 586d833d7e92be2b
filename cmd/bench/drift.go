package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/allreduce/calibrate"
)

// Drift between a calibration's rounds. Each cell of -calibrate's tables
// is the median of its rounds, which hides a host whose speed moved while
// it measured: a neighbour's burst, or a congestion control that paces
// (under BBR, a calibration's first round of tcp all-reduces ran markedly
// faster than the others; docs/measurements.md). So the report gives each
// round's pace: the geometric mean, over the cells, of the round's time
// over the cell's median, and says so when the rounds' paces differ by
// more than driftLimit. A slowdown that holds from the first round on (BBR's, after
// the ring exchange) shows only against separate runs.
const driftLimit = 1.2

// roundPaces is each round's pace (rounds of the same rows in the same
// order, as sweepRounds returns them): exp(mean over cells of log(time /
// the cell's median over the rounds)). Cells without a positive time in
// every round are left out; nil when no cell is left.
func roundPaces(rounds [][]row) []float64 {
	if len(rounds) == 0 {
		return nil
	}
	sums := make([]float64, len(rounds))
	cells := 0
	for i := range rounds[0] {
		times := make([]float64, len(rounds))
		for r, rs := range rounds {
			if i >= len(rs) || !(rs[i].TimeUS > 0) {
				times = nil
				break
			}
			times[r] = rs[i].TimeUS
		}
		if times == nil {
			continue
		}
		med := calibrate.MedianOf(times)
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

// writeDrift writes the rounds' paces (roundPaces) as one line, and a
// warning when they differ by more than driftLimit.
func writeDrift(w io.Writer, rounds [][]row) error {
	paces := roundPaces(rounds)
	if len(paces) < 2 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# each round's times over the cells' medians (geometric mean):")
	for r, p := range paces {
		fmt.Fprintf(&b, " round %d %.2f", r, p)
	}
	b.WriteString("\n")
	if slices.Max(paces) > driftLimit*slices.Min(paces) {
		fmt.Fprintf(&b, "# warning: the rounds' paces differ by %.2fx: the host's speed moved while measuring (another job, "+
			"or a congestion control that paces, as BBR: RINGDDP_TCP_CONGESTION, docs/multiprocess.md); calibrate again when it is steady\n",
			slices.Max(paces)/slices.Min(paces))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
