package calibrate

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestRoundPaces: each round's pace is the geometric mean of its times
// over the cells' medians; a cell missing a time in some round is left
// out; the warning comes when the paces differ by more than DriftLimit,
// and not below it.
func TestRoundPaces(t *testing.T) {
	cells := func(times ...float64) []float64 { return times }
	// Two cells; round 0 at 0.75 of the others' pace, rounds 1 and 2 alike.
	rounds := [][]float64{cells(75, 750, 5), cells(100, 1000, 0), cells(100, 1000, 7)}
	paces := RoundPaces(rounds)
	want := []float64{0.75, 1, 1}
	for r := range want {
		if math.Abs(paces[r]-want[r]) > 1e-12 {
			t.Fatalf("paces %v, want %v", paces, want)
		}
	}
	var b strings.Builder
	if err := WriteDrift(&b, rounds); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "round 0 0.75 round 1 1.00 round 2 1.00") || !strings.Contains(out, "warning: the rounds' paces differ by 1.33x") {
		t.Errorf("report:\n%s", out)
	}
	b.Reset()
	if err := WriteDrift(&b, [][]float64{cells(100, 1000), cells(110, 1050)}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "warning") || !strings.Contains(out, "round 1") {
		t.Errorf("steady rounds:\n%s", out)
	}
	if RoundPaces(nil) != nil || RoundPaces([][]float64{cells(0), cells(1)}) != nil {
		t.Error("no cells: want no paces")
	}
}

// TestCellMedians: each cell of the first round takes the median and the
// minimum of the rounds that have it, without changing the rounds.
func TestCellMedians(t *testing.T) {
	rounds := [][]float64{{3, 10}, {1, 30}, {2}}
	med, lo := CellMedians(rounds)
	if !slices.Equal(med, []float64{2, 20}) || !slices.Equal(lo, []float64{1, 10}) {
		t.Errorf("medians %v, minimums %v; want [2 20], [1 10]", med, lo)
	}
	if !slices.Equal(rounds[0], []float64{3, 10}) || !slices.Equal(rounds[1], []float64{1, 30}) {
		t.Errorf("rounds changed: %v", rounds)
	}
	if med, lo := CellMedians(nil); med != nil || lo != nil {
		t.Errorf("no rounds: %v, %v", med, lo)
	}
}

// TestSamplesAndAccuracy: the refit's samples are the timings of single
// algorithms with a shape and a positive time; the accuracy summary has a
// line per algorithm with a ratio, in their first timing's order.
func TestSamplesAndAccuracy(t *testing.T) {
	shape := cost.Shape{Ranks: 4, Nodes: 1}
	ts := []Timing{
		{Algo: "tree", Bytes: 1024, Seconds: 2e-6, Shape: shape, Ratio: 1.1},
		{Algo: "ring", Bytes: 1024, Seconds: 1e-6, Shape: shape, Ratio: 0.5},
		{Algo: "ring", Bytes: 2048, Seconds: 3e-6, Shape: shape, Ratio: 1},
		{Algo: "auto", Bytes: 1024, Seconds: 1e-6, Shape: shape, Ratio: 1},
		{Algo: "hd", Bytes: 1024, Seconds: 1e-6, Ratio: math.NaN()},
		{Algo: "direct", Bytes: 1024, Shape: shape, Ratio: math.NaN()},
	}
	if got := Samples(ts); len(got) != 3 {
		t.Errorf("%d samples, want 3 (tree, ring, ring): %+v", len(got), got)
	}
	var b strings.Builder
	if err := WriteAccuracy(&b, ts); err != nil {
		t.Fatal(err)
	}
	want := "# measured / predicted, per algorithm over the sizes: median [min, max], sizes within 25%\n" +
		"#   tree           1.10 [1.10, 1.10]  1/1\n" +
		"#   ring           0.75 [0.50, 1.00]  1/2\n" +
		"#   auto           1.00 [1.00, 1.00]  1/1\n"
	if b.String() != want {
		t.Errorf("accuracy:\n%s\nwant:\n%s", b.String(), want)
	}
}
