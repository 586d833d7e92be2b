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
			// 2 algorithms × 2 sizes × (3 + 1) calls on each of 3 ranks,
			// and each sweep's first size its settling iterations.
			want := 2 * (2*(3+1) + settleIterations(8))
			for r := 0; r < 3; r++ {
				if calls[r] != want {
					t.Errorf("rank %d: %d collective events, want %d", r, calls[r], want)
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

// A sweep's first size settles fresh endpoints with up to 100 more untimed
// iterations, fewer as its bytes grow, at least one.
func TestSettleIterations(t *testing.T) {
	for _, c := range []struct{ bytes, want int }{
		{0, 100}, {1, 100}, {4 << 10, 100}, {(64 << 20) / 100, 100}, {(64<<20)/99 + 1, 99},
		{1 << 20, 64}, {64<<20 - 1, 2}, {64 << 20, 1}, {1 << 30, 1},
	} {
		if got := settleIterations(c.bytes); got != c.want {
			t.Errorf("settleIterations(%d) = %d, want %d", c.bytes, got, c.want)
		}
	}
}
