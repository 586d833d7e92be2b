package main

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/ringddp/ringddp/internal/freeport"
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

// -trace with two nodes' launchers (over loopback, 2 ranks each): both
// end with status 0. On a filesystem they share, node 0 merges all four
// ranks' parts and none is left; on disks of their own (another -trace
// directory per node) node 0's file holds its two ranks and node 1's
// parts stay on its disk, each a trace file of its own.
func TestTraceTwoNodes(t *testing.T) {
	t.Setenv("RINGDDP_SECRET", "bench trace test secret of both nodes")
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "separate"}[shared], func(t *testing.T) {
			dirs := []string{t.TempDir(), t.TempDir()}
			if shared {
				dirs[1] = dirs[0]
			}
			master := "127.0.0.1:" + strconv.Itoa(freeport.Loopback(t))
			errs, outs := make([]error, 2), make([]string, 2)
			var wg sync.WaitGroup
			for node := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[node], errs[node] = runBench(t, "-transport", "tcp", "-ranks", "2", "-nnodes", "2", "-node-rank", strconv.Itoa(node),
						"-master", master, "-min", "64", "-max", "64", "-iters", "2", "-warmup", "1", "-algo", "ring",
						"-trace", filepath.Join(dirs[node], "bench.json"))
				}()
			}
			wg.Wait()
			for node, err := range errs {
				if err != nil {
					t.Fatalf("node %d: %v\n%s", node, err, outs[node])
				}
			}
			f, err := trace.ReadFile(filepath.Join(dirs[0], "bench.json"))
			if err != nil {
				t.Fatal(err)
			}
			pids := map[int]bool{}
			for _, e := range f.Events {
				if e.Ph == "X" {
					pids[e.Pid] = true
				}
			}
			want := map[int]bool{0: true, 1: true}
			if shared {
				want[2], want[3] = true, true
			}
			if !maps.Equal(pids, want) {
				t.Errorf("ranks in node 0's trace: %v, want %v", pids, want)
			}
			for r := range 4 {
				_, err := os.Stat(trace.RankFile(filepath.Join(dirs[r/2], "bench.json"), r))
				if left := err == nil; left != (!shared && r >= 2) {
					t.Errorf("rank %d's part left behind: %v (want %v)", r, left, !shared && r >= 2)
				}
			}
			if !shared {
				part, err := trace.ReadFile(trace.RankFile(filepath.Join(dirs[1], "bench.json"), 3))
				if err != nil || len(part.Events) == 0 {
					t.Errorf("node 1's rank 3 part: %d events, %v", len(part.Events), err)
				}
			}
		})
	}
}
