package main

import (
	"strings"
	"testing"

	"github.com/ringddp/ringddp/internal/run/launch/selftest"
)

func TestMain(m *testing.M) { selftest.Main(m, "bench", main) }

// Three tcp ranks in separate processes: every row correct, reported once
// (by rank 0's process).
func TestTCPRanks(t *testing.T) {
	out, err := runBench(t, "-transport", "tcp", "-ranks", "3", "-min", "8", "-max", "256K", "-factor", "8",
		"-iters", "3", "-warmup", "1", "-json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := jsonRows(t, out)
	if len(rows) != 6 { // 8 B … 256 KiB
		t.Fatalf("%d rows, want 6:\n%s", len(rows), out)
	}
	for i, r := range rows {
		if r["transport"] != "tcp" || num(t, r, "ranks") != 3 || num(t, r, "wrong") != 0 || num(t, r, "time_us") <= 0 {
			t.Errorf("row %d: %v", i, r)
		}
	}

	out, err = runBench(t, "-transport", "tcp", "-ranks", "2", "-op", "allgather", "-min", "64K", "-max", "64K", "-factor", "1",
		"-iters", "2", "-warmup", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Count(out, "# ringddp bench:") != 1 || strings.Count(out, "# wrong elements    : 0 OK") != 1 || strings.Contains(out, "[rank") {
		t.Errorf("want one table, from rank 0:\n%s", out)
	}
}

func TestTCPFlags(t *testing.T) {
	if _, err := parseConfig([]string{"-master", "h:1"}, nil); err == nil || !strings.Contains(err.Error(), "-master applies to -transport tcp only") {
		t.Errorf("-master with inproc: %v", err)
	}
	cfg, err := parseConfig([]string{"-transport", "tcp", "-ranks", "3"}, nil)
	if err != nil || !cfg.mp.Launcher || cfg.ranks != 3 {
		t.Fatalf("launcher: %+v, %v", cfg, err)
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "2")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "3")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	cfg, err = parseConfig([]string{"-transport", "tcp", "-op", "broadcast", "-root", "2"}, nil)
	if err != nil || cfg.mp.Launcher || cfg.ranks != 3 || cfg.mp.Env.Rank != 2 {
		t.Fatalf("mpirun rank: %+v, %v", cfg, err)
	}
	if _, err := parseConfig([]string{"-transport", "tcp", "-ranks", "4"}, nil); err == nil || !strings.Contains(err.Error(), "OMPI_COMM_WORLD_SIZE=3") {
		t.Errorf("-ranks 4 under mpirun -np 3: %v", err)
	}
}
