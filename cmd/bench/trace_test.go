package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringddp/ringddp/internal/trace"
)

// -trace writes one collective event per call and rank, every rank a
// track of its own, in process and over tcp (rank files merged by the
// launcher, none left behind).
func TestTrace(t *testing.T) {
	for _, tr := range []string{"inproc", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bench.json")
			out, err := runBench(t, "-transport", tr, "-ranks", "3", "-min", "8", "-max", "64", "-factor", "8",
				"-iters", "3", "-warmup", "1", "-algo", "ring,hd", "-trace", path)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			f, err := trace.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			calls := map[int]int{}
			algos := map[string]bool{}
			for _, e := range f.Events {
				if e.Ph != "X" {
					continue
				}
				calls[e.Pid]++
				if a, ok := e.Args["algo"].(string); ok {
					algos[a] = true
				}
				if e.Name != "allreduce" || e.Dur == nil || *e.Dur < 0 {
					t.Errorf("event %+v", e)
				}
			}
			// 2 algorithms × 2 sizes × (3 + 1) calls on each of 3 ranks.
			for r := 0; r < 3; r++ {
				if calls[r] != 16 {
					t.Errorf("rank %d: %d collective events, want 16", r, calls[r])
				}
			}
			if !algos["ring"] || !algos["hd"] {
				t.Errorf("algorithms in the trace: %v", algos)
			}
			if _, err := os.Stat(trace.RankFile(path, 1)); !os.IsNotExist(err) {
				t.Errorf("rank file left behind: %v", err)
			}
		})
	}
}
