package calibrate

import (
	"math"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// The refit for choices: on samples a model made, its Auto misses nothing
// and the step keeps the model as it is. Then, at the size where
// recursive doubling and halving-doubling cross, the model's pick is made
// to measure 1.3 times the other: the model misses the goal there, and
// the step ends at a model that ranks the two there the way they measured
// (no miss left) and still predicts the rest within a few percent.
func TestRefitForChoices(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of fitting")
	}
	l := cost.Link{Alpha: 20e-6, Beta: 1e-9}
	truth := cost.Model{Intra: l, Inter: l, Gamma: 2e-10, Ports: 2}
	shape := cost.FlatShape(4)
	samples := predictedSamples(truth, shape, 2)
	if m, e, line := RefitForChoices(truth, 0, samples); m != truth || e != 0 || line != "" {
		t.Fatalf("on the model's own times: %+v, error %g, %q", m, e, line)
	}

	// The size where recursive doubling and halving-doubling lie closest
	// (their crossover, which the model's α against its β moves): the
	// one the model picks there is made to measure 1.3 times the other.
	at, closest := 0, math.Inf(1)
	times := map[int]map[allreduce.Algorithm]float64{}
	for _, s := range samples {
		if times[s.bytes] == nil {
			times[s.bytes] = map[allreduce.Algorithm]float64{}
		}
		times[s.bytes][s.algo] = s.seconds
	}
	for b, ts := range times {
		if r := math.Abs(math.Log(ts[allreduce.Doubling] / ts[allreduce.HalvingDoubling])); r < closest {
			at, closest = b, r
		}
	}
	pick := allreduce.Choose(truth, shape, at)
	other := allreduce.Doubling
	if pick == allreduce.Doubling {
		other = allreduce.HalvingDoubling
	}
	if pick != allreduce.Doubling && pick != allreduce.HalvingDoubling {
		t.Fatalf("at %d B the model picks %v, not doubling or hd", at, pick)
	}
	for i, s := range samples {
		if s.bytes == at && s.algo == pick {
			samples[i].seconds = 1.3 * times[at][other]
		}
	}
	e := refitError(truth, samples)
	if misses, _ := choiceMisses(truth, groupBySize(samples)); misses != 1 {
		t.Fatalf("%d misses before, want 1 (at %d B, %v)", misses, at, pick)
	}
	m, me, line := RefitForChoices(truth, e, samples)
	misses, worst := choiceMisses(m, groupBySize(samples))
	if misses != 0 || !strings.HasSuffix(line, ": kept\n") {
		t.Errorf("after the refit for choices %d misses (worst %.2f×), want 0: %s", misses, worst, line)
	}
	if got := allreduce.Choose(m, shape, at); got == pick {
		t.Errorf("at %d B it still picks %v", at, got)
	}
	if me != refitError(m, samples) || me > 0.06*0.06 {
		t.Errorf("refit error %g (%s rms) after, %g before", me, rmsText(me), e)
	}
}
