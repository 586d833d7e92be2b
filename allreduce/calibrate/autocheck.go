package calibrate

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// The check -calibrate ends with: the fitted model's Auto (its argmin,
// allreduce.Choose) at every size the calibration measured, against the
// fastest algorithm measured there. The model is fitted to every
// algorithm's times at once (refit.go); where two algorithms' measured
// times lie close, a fit that is good on average can still rank them the
// wrong way round, and then Auto runs the slower one at that size on this
// host. The goal (issue 16) is a pick never more than autoGoal over the
// fastest; the report names every size where it is not met, so that the
// user learns it from the calibration rather than from a slow job.

// autoGoal is the most Auto's pick may measure over the fastest
// algorithm's time at a size of the calibration.
const autoGoal = 1.1

// AutoPick is one size of a calibration: what the model's Auto picks
// there and how its measured time compares with the fastest measured.
type AutoPick struct {
	bytes           int
	pick, fastest   allreduce.Algorithm
	pickS, fastestS float64 // measured seconds; pickS is 0 when the pick was not measured
}

// ratio is the pick's measured time over the fastest's (+Inf when the
// pick was not measured).
func (p AutoPick) ratio() float64 {
	if p.pickS <= 0 {
		return math.Inf(1)
	}
	return p.pickS / p.fastestS
}

// AutoPicks is m's Auto at every size of samples (one calibration: one
// shape per size), in increasing size.
func AutoPicks(m cost.Model, samples []Sample) []AutoPick {
	return groupBySize(samples).picks(m)
}

// sizeGroups are samples grouped by their bytes, the sizes in increasing
// order: grouped once where many models are checked against them.
type sizeGroups struct {
	sizes []int
	at    map[int][]Sample
}

func groupBySize(samples []Sample) sizeGroups {
	at := map[int][]Sample{}
	for _, s := range samples {
		at[s.bytes] = append(at[s.bytes], s)
	}
	return sizeGroups{slices.Sorted(maps.Keys(at)), at}
}

// picks is m's Auto at every size of g (autoPicks).
func (g sizeGroups) picks(m cost.Model) []AutoPick {
	out := make([]AutoPick, 0, len(g.sizes))
	for _, bytes := range g.sizes {
		at := g.at[bytes]
		p := AutoPick{bytes: bytes, pick: allreduce.Choose(m, at[0].shape, bytes), fastestS: math.Inf(1)}
		for _, s := range at {
			if s.seconds < p.fastestS {
				p.fastest, p.fastestS = s.algo, s.seconds
			}
			if s.algo == p.pick {
				p.pickS = s.seconds
			}
		}
		out = append(out, p)
	}
	return out
}

// PrintAutoPicks writes the check: a row per size, the mean and worst
// ratio, and a warning naming every size past autoGoal.
func PrintAutoPicks(w io.Writer, picks []AutoPick) error {
	if len(picks) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Auto (the fitted model's argmin) on these measurements, against the fastest measured at each size (the goal: within %.0f%%):\n", (autoGoal-1)*100)
	fmt.Fprintf(&b, "#%12s  %-14s %10s  %-14s %10s %7s\n", "size (B)", "Auto picks", "(us)", "fastest", "(us)", "ratio")
	sum, counted, within := 0.0, 0, 0
	worst := picks[0]
	var missed []string
	for _, p := range picks {
		r := p.ratio()
		pick := fmt.Sprintf("%10.2f", p.pickS*1e6)
		if p.pickS <= 0 {
			pick = fmt.Sprintf("%10s", "not timed")
		} else {
			sum += r
			counted++
		}
		fmt.Fprintf(&b, "%13d  %-14v %s  %-14v %10.2f %7.2f\n", p.bytes, p.pick, pick, p.fastest, p.fastestS*1e6, r)
		if r <= autoGoal {
			within++
		} else {
			missed = append(missed, fmt.Sprintf("%s (%v, %.2f× %v)", bytesize.Format(p.bytes), p.pick, r, p.fastest))
		}
		if r > worst.ratio() {
			worst = p
		}
	}
	mean := math.NaN()
	if counted > 0 {
		mean = sum / float64(counted)
	}
	fmt.Fprintf(&b, "# Auto's picks: on average %.3f× the fastest, the worst %.2f× (%v at %s); %d of %d sizes within %.0f%%\n",
		mean, worst.ratio(), worst.pick, bytesize.Format(worst.bytes), within, len(picks), (autoGoal-1)*100)
	if len(missed) > 0 {
		fmt.Fprintf(&b, "# warning: Auto's pick is more than %.0f%% slower than the fastest at %s: the model ranks those algorithms otherwise than they measured here; calibrate again when the host is quiet, or set the algorithm for those sizes (-algo, allreduce.WithAlgorithm)\n",
			(autoGoal-1)*100, strings.Join(missed, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
