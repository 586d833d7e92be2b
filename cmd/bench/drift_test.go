package main

import (
	"math"
	"strings"
	"testing"
)

// TestRoundPaces: each round's pace is the geometric mean of its times
// over the cells' medians; a cell missing a time in some round is left
// out; the warning comes when the paces differ by more than driftLimit,
// and not below it.
func TestRoundPaces(t *testing.T) {
	cells := func(times ...float64) []row {
		var rs []row
		for _, x := range times {
			rs = append(rs, row{TimeUS: x})
		}
		return rs
	}
	// Two cells; round 0 at 0.75 of the others' pace, rounds 1 and 2 alike.
	rounds := [][]row{cells(75, 750, 5), cells(100, 1000, 0), cells(100, 1000, 7)}
	paces := roundPaces(rounds)
	want := []float64{0.75, 1, 1}
	for r := range want {
		if math.Abs(paces[r]-want[r]) > 1e-12 {
			t.Fatalf("paces %v, want %v", paces, want)
		}
	}
	var b strings.Builder
	if err := writeDrift(&b, rounds); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "round 0 0.75 round 1 1.00 round 2 1.00") || !strings.Contains(out, "warning: the rounds' paces differ by 1.33x") {
		t.Errorf("report:\n%s", out)
	}
	b.Reset()
	if err := writeDrift(&b, [][]row{cells(100, 1000), cells(110, 1050)}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "warning") || !strings.Contains(out, "round 1") {
		t.Errorf("steady rounds:\n%s", out)
	}
	if roundPaces(nil) != nil || roundPaces([][]row{cells(0), cells(1)}) != nil {
		t.Error("no cells: want no paces")
	}
}
