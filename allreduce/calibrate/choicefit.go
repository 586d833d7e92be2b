package calibrate

import (
	"fmt"
	"math"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// The refit for choices, -calibrate's last step. The refit (refit.go)
// minimises the prediction error over every algorithm and size; where two
// algorithms' measured times lie close, the fitted model can still rank
// them the wrong way round, and its Auto then runs the slower one there on
// the very host it was calibrated on (in process, calibrations fitted
// models that pick direct at sizes where the ring measured faster:
// docs/measurements.md). What a calibration is for is Auto's
// choices, so when the fitted model's Auto misses the goal (autocheck.go:
// a pick more than autoGoal over the fastest measured at its size) at some
// size, the descent runs once more from it on the error plus a penalty
// for ranking an algorithm that measured over the goal's margin slower
// below the fastest (rankPenalty) and one for each size still missed
// (missPenalty), and the model it ends at is the profile's when its Auto
// misses less. What it costs is printed beside what it gains: on the
// calibrations it was tried on (docs/measurements.md) it removed every
// miss for a somewhat larger prediction error. The price of ranking two
// algorithms as they measured is a model that predicts less well
// elsewhere, and the choices are what the calibration is for. When the
// fitted model misses nothing the step changes nothing: the stored
// profiles, whose Auto meets the goal, are the refit's output alone.

// choiceWeight weighs the ranking penalty against the refit's error (the
// mean squared log ratio of predicted to measured time, a few hundredths
// for the stored profiles' fits): a size where the model prices an
// algorithm that measured over autoGoal slower 10% below the fastest adds
// about 0.01, enough that the descent gives up a little rms error to rank
// them as they measured, not so much that it bends the model around one
// noisy cell at any price.
const choiceWeight = 0.1

// missPenalty is the cost of each size whose pick misses the goal, on
// top of rankPenalty: the ranking penalty gives the descent its direction,
// this the reward for a pick that changes (where the model cannot price
// the slow one above the fastest, a third algorithm within the goal will
// do).
const missPenalty = 0.01

// rankPenalty is how far m ranks the samples otherwise than they
// measured, where it matters to Auto: at each size, for every algorithm
// measured more than autoGoal over the fastest there, the log of how far
// m predicts it below the fastest (0 where m predicts it above), summed
// and weighted by choiceWeight. With none, m's Auto meets the goal at
// every size (it picks the fastest or one within autoGoal of it).
func rankPenalty(m cost.Model, g sizeGroups) float64 {
	sum := 0.0
	for _, bytes := range g.sizes { // in order: the sum is the same every run
		at := g.at[bytes]
		fastest := at[0]
		for _, s := range at {
			if s.seconds < fastest.seconds {
				fastest = s
			}
		}
		pf, ok := allreduce.PredictAlgorithm(m, fastest.shape, fastest.algo, fastest.bytes)
		if !ok || !(pf > 0) {
			continue
		}
		for _, s := range at {
			if s.seconds <= autoGoal*fastest.seconds {
				continue
			}
			if p, ok := allreduce.PredictAlgorithm(m, s.shape, s.algo, s.bytes); ok && p > 0 && p < pf {
				sum += math.Log(pf / p)
			}
		}
	}
	return choiceWeight * sum
}

// choiceMisses is the number of sizes where m's Auto misses the goal on
// the samples of g, and the worst ratio over all sizes (autocheck.go).
func choiceMisses(m cost.Model, g sizeGroups) (misses int, worst float64) {
	for _, p := range g.picks(m) {
		r := p.ratio()
		worst = max(worst, r)
		if r > autoGoal {
			misses++
		}
	}
	return misses, worst
}

// RefitForChoices is the refit for choices from fitted model m (of
// refit error e): the model to keep, its refit error, and the report's
// line (empty when m's Auto misses nothing).
func RefitForChoices(m cost.Model, e float64, samples []Sample) (cost.Model, float64, string) {
	g := groupBySize(samples)
	misses, worst := choiceMisses(m, g)
	if misses == 0 {
		return m, e, ""
	}
	errf := func(c cost.Model) float64 {
		n, _ := choiceMisses(c, g)
		return refitError(c, samples) + rankPenalty(c, g) + missPenalty*float64(n)
	}
	c, _ := descend(m, errf(m), refitMoves(maxPortsOf(samples)), errf)
	cMisses, cWorst := choiceMisses(c, g)
	ce := refitError(c, samples)
	line := fmt.Sprintf("# refit for choices: the fitted model's Auto missed the %.0f%% goal at %d sizes (worst %.2f×); refitted with its misrankings as a penalty: %d sizes (worst %.2f×), rms prediction error %s → %s",
		(autoGoal-1)*100, misses, worst, cMisses, cWorst, rmsText(e), rmsText(ce))
	if cMisses > misses || cMisses == misses && cWorst >= worst {
		return m, e, line + ": no better, kept the fitted model\n"
	}
	return c, ce, line + ": kept\n"
}
