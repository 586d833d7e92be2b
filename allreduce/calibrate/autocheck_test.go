package calibrate

import (
	"math"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// The check against samples the model itself made: Auto picks the
// fastest at every size (ratio 1, no warning). Then the pick's time at
// one size made 1.3 times the fastest: the warning names that size, the
// pick and the ratio; and a size where the pick was not timed counts as
// past the goal.
func TestAutoPicks(t *testing.T) {
	l := cost.Link{Alpha: 20e-6, Beta: 1e-9}
	m := cost.Model{Intra: l, Inter: l, Gamma: 2e-10}
	shape := cost.FlatShape(4)
	samples := predictedSamples(m, shape, 4)
	picks := AutoPicks(m, samples)
	if len(picks) != 8 { // 4 KiB … 64 MiB by 4: the sizes of predictedSamples
		t.Fatalf("%d sizes, want 8", len(picks))
	}
	for i, p := range picks {
		if i > 0 && p.bytes <= picks[i-1].bytes {
			t.Errorf("sizes not increasing: %d after %d", p.bytes, picks[i-1].bytes)
		}
		if p.ratio() != 1 || p.pick != p.fastest {
			t.Errorf("%d B: Auto picks %v (%.3g s), fastest %v (%.3g s) on the model's own times", p.bytes, p.pick, p.pickS, p.fastest, p.fastestS)
		}
	}
	var b strings.Builder
	if err := PrintAutoPicks(&b, picks); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "warning") || !strings.Contains(out, "8 of 8 sizes within 10%") {
		t.Errorf("on the model's own times:\n%s", out)
	}

	// Slow the pick at 1 MiB to 1.3× the fastest other algorithm there.
	const at = 1 << 20
	pick := allreduce.Choose(m, shape, at)
	second := math.Inf(1)
	for _, s := range samples {
		if s.bytes == at && s.algo != pick {
			second = min(second, s.seconds)
		}
	}
	for i, s := range samples {
		if s.bytes == at && s.algo == pick {
			samples[i].seconds = 1.3 * second
		}
	}
	// Drop the pick at 4 KiB: it was not timed.
	small := allreduce.Choose(m, shape, 4<<10)
	kept := samples[:0]
	for _, s := range samples {
		if s.bytes != 4<<10 || s.algo != small {
			kept = append(kept, s)
		}
	}
	picks = AutoPicks(m, kept)
	b.Reset()
	if err := PrintAutoPicks(&b, picks); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"6 of 8 sizes within 10%", "warning", "1MiB (" + pick.String() + ", 1.30×", "4KiB (" + small.String() + ", +Inf×", "not timed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
