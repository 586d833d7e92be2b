package main

import (
	"strings"
	"testing"
)

// -back-to-back: a size's iterations follow one another with no barrier
// between them (each algorithm's calls must still keep to themselves: the
// checked call follows the timed ones at once), the header says so, and
// without the flag it does not. Under the race detector in process only
// (the tcp ranks' processes took it to 5.6 s; in process 1 s).
func TestBackToBack(t *testing.T) {
	transports := []string{"inproc", "tcp"}
	if raceEnabled {
		transports = transports[:1]
	}
	for _, tr := range transports {
		out, err := runBench(t, "-transport", tr, "-ranks", "3", "-algo", "ring,hd,tree,doubling", "-back-to-back",
			"-min", "1K", "-max", "64K", "-factor", "8", "-iters", "5", "-warmup", "2")
		if err != nil {
			t.Fatalf("%s: %v\n%s", tr, err, out)
		}
		if !strings.Contains(out, "warmup 2, back-to-back, check true") || !strings.Contains(out, "a barrier before a size's first") {
			t.Errorf("%s: the header does not say back-to-back:\n%s", tr, out)
		}
		rows := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "#") {
				rows++
				if wrong := f[len(f)-1]; wrong != "0" {
					t.Errorf("%s: %s wrong elements: %s", tr, wrong, line)
				}
			}
		}
		if rows != 12 {
			t.Errorf("%s: %d rows, want 4 algorithms × 3 sizes:\n%s", tr, rows, out)
		}
	}
	out, err := runBench(t, "-ranks", "4", "-local-size", "2", "-algo", "hierarchical,torus", "-back-to-back",
		"-min", "1K", "-max", "64K", "-factor", "64", "-iters", "5", "-warmup", "2", "-json")
	if err != nil {
		t.Fatalf("nodes of 2: %v\n%s", err, out)
	}
	if rows := jsonRows(t, out); len(rows) != 4 {
		t.Errorf("nodes of 2: %d rows, want 2 algorithms × 2 sizes:\n%s", len(rows), out)
	} else {
		for _, r := range rows {
			if num(t, r, "wrong") != 0 {
				t.Errorf("nodes of 2: %v", r)
			}
		}
	}
	out, err = runBench(t, "-ranks", "2", "-min", "1K", "-max", "1K", "-iters", "1")
	if err != nil || strings.Contains(out, "back-to-back") {
		t.Errorf("without -back-to-back: %v\n%s", err, out)
	}
}
