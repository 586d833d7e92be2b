package main

import (
	"bufio"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// jsonObjects parses -json output into objects, without rowKeys' check
// (the simulator's and the model's rows have more keys).
func jsonObjects(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	return objs
}

// TestSimTable: 64 simulated ranks on 8 nodes, every algorithm: a row per
// algorithm and size, every one checked and right, with the model's
// columns, and the same virtual times on a second run.
func TestSimTable(t *testing.T) {
	args := []string{"-transport", "sim", "-ranks", "64", "-nodes", "8", "-min", "1K", "-max", "64K", "-factor", "64", "-algo", "all", "-json"}
	out, err := runBench(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := jsonObjects(t, out)
	algos := []string{"auto", "ring", "doubling", "tree", "hd", "hierarchical", "torus", "mesh"}
	if len(rows) != 2*len(algos) { // 1 KiB, 64 KiB
		t.Fatalf("%d rows, want %d:\n%s", len(rows), 2*len(algos), out)
	}
	for i, r := range rows {
		if want := algos[i/2]; r["algo"] != want || r["transport"] != "sim" || num(t, r, "ranks") != 64 {
			t.Errorf("row %d: %v, want algo %s", i, r, want)
		}
		if num(t, r, "wrong") != 0 || num(t, r, "time_us") <= 0 || num(t, r, "link_gbps") != 12.5 {
			t.Errorf("row %d: %v", i, r)
		}
		if num(t, r, "pred_us") <= 0 || num(t, r, "ratio") <= 0 || r["pick"] == "" {
			t.Errorf("row %d: no prediction: %v", i, r)
		}
		if r["algo"] != "auto" && r["pick"] != r["algo"] {
			t.Errorf("row %d: pick %v of algo %v", i, r["pick"], r["algo"])
		}
	}
	again, err := runBench(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if again != out {
		t.Errorf("two runs differ:\n%s\n---\n%s", out, again)
	}
}

// TestSimPayload: a timing-only row (bytes accounted, not allocated) has
// no wrong count and the virtual time of the same row with real payloads;
// -sim-payload auto goes timing-only above 256 MiB of ranks × bytes.
func TestSimPayload(t *testing.T) {
	times := map[string][]float64{}
	for _, mode := range []string{"real", "none"} {
		out, err := runBench(t, "-transport", "sim", "-ranks", "16", "-local-size", "4", "-algo", "ring,torus",
			"-min", "64K", "-max", "256K", "-factor", "4", "-sim-payload", mode, "-json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		for _, r := range jsonObjects(t, out) {
			if (mode == "none") != (r["wrong"] == nil) {
				t.Errorf("%s: wrong %v", mode, r["wrong"])
			}
			times[mode] = append(times[mode], num(t, r, "time_us"))
		}
	}
	if len(times["real"]) != 4 || fmtFloats(times["real"]) != fmtFloats(times["none"]) {
		t.Errorf("real payloads %v, timing-only %v: want the same virtual times", times["real"], times["none"])
	}

	// 1024 ranks × 512 KiB is above the limit (TestSimFlags: 256 KiB is not).
	out, err := runBench(t, "-transport", "sim", "-ranks", "1024", "-nodes", "128", "-algo", "hd", "-min", "512K", "-max", "512K", "-factor", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var wrong []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 10 && !strings.HasPrefix(line, "#") {
			wrong = append(wrong, f[9])
		}
	}
	if strings.Join(wrong, " ") != "-" || !strings.Contains(out, "OK (1 timing-only rows not checked)") {
		t.Errorf("512 KiB × 1024 ranks: wrong column %v, want -\n%s", wrong, out)
	}
}

// TestSimSharedNICs: every collective on ranks whose nodes share a NIC
// (-nics 1) runs to a checked result, as deterministically as without
// (two runs, the same times), and no faster.
func TestSimSharedNICs(t *testing.T) {
	for _, op := range []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter"} {
		run := func(nics string) []float64 {
			t.Helper()
			out, err := runBench(t, "-transport", "sim", "-ranks", "12", "-nodes", "3", "-nics", nics, "-op", op,
				"-min", "4K", "-max", "1M", "-factor", "16", "-sim-payload", "real", "-json")
			if err != nil {
				t.Fatalf("%s, -nics %s: %v\n%s", op, nics, err, out)
			}
			var times []float64
			for _, r := range jsonObjects(t, out) {
				if num(t, r, "wrong") != 0 {
					t.Errorf("%s, -nics %s: wrong %v", op, nics, r["wrong"])
				}
				times = append(times, num(t, r, "time_us"))
			}
			return times
		}
		shared, again, alone := run("1"), run("1"), run("0")
		if fmtFloats(shared) != fmtFloats(again) {
			t.Errorf("%s: two runs on shared NICs: %v, %v", op, shared, again)
		}
		for i := range alone {
			if shared[i] < alone[i] {
				t.Errorf("%s, row %d: %v µs on shared NICs, %v µs with a NIC per rank", op, i, shared[i], alone[i])
			}
		}
	}
}

func fmtFloats(xs []float64) string {
	b, _ := json.Marshal(xs)
	return string(b)
}

// TestSimFlags: the simulator's and the model's flags, and their errors.
func TestSimFlags(t *testing.T) {
	cfg, err := parseConfig([]string{"-transport", "sim", "-ranks", "1024", "-nodes", "128", "-inter-gbps", "200", "-alpha-us", "2", "-iters", "7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.model
	if cfg.localSize != 8 || cfg.iters != 1 || cfg.warmup != 0 || m == nil ||
		m.Inter.Beta != 8/200e9 || m.Intra.Beta != 8/2000e9 || m.Inter.Alpha != 2e-6 || m.Intra.Alpha != 1e-6 {
		t.Errorf("config %+v, model %+v", cfg, m)
	}
	if cfg.virtualAt(256<<10) || !cfg.virtualAt(512<<10) {
		t.Errorf("1024 ranks: 256 KiB should be real, 512 KiB timing-only")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-transport", "tcp", "-nodes", "2"}, "-nodes applies to -transport sim and inproc only"},
		{[]string{"-transport", "sim", "-sim-payload", "bad"}, `-sim-payload "bad": unknown mode (valid: auto, real, none)`},
		{[]string{"-sim-payload", "none"}, "-sim-payload applies to -transport sim only"},
		{[]string{"-transport", "sim", "-ranks", "9", "-nodes", "4"}, "-nodes 4: 9 ranks do not split into 4 nodes"},
		{[]string{"-transport", "sim", "-nodes", "5"}, "-nodes 5: need 1 to -ranks (4)"},
		{[]string{"-transport", "sim", "-nodes", "2", "-local-size", "2"}, "give one"},
		{[]string{"-transport", "sim", "-inter-gbps", "0"}, "-inter-gbps 0: need a rate > 0 Gb/s"},
		{[]string{"-transport", "sim", "-gamma-gbps", "-1"}, "-gamma-gbps -1: need a rate > 0 Gb/s"},
		{[]string{"-transport", "sim", "-alpha-us", "-1"}, "-alpha-us -1: need a latency ≥ 0 µs"},
		{[]string{"-transport", "sim", "-algo", "direct"}, "-algo direct: cannot run on -transport sim"},
		{[]string{"-transport", "tcp", "-algo", "ring,direct"}, "-algo direct: cannot run on -transport tcp"},
		{[]string{"-algo", "ring,ring"}, "ring twice"},
		{[]string{"-algo", "ring,nosuch"}, "-algo: "},
		{[]string{"-op", "broadcast", "-algo", "all"}, "-algo all: -op broadcast has one algorithm"},
		{[]string{"-profile", "/nonexistent/p.json"}, "-profile: cost profile: "},
		{[]string{"-explain", "-plot", "x.png"}, "-plot draws a run's rows; -explain runs nothing"},
		{[]string{"-explain", "-op", "allgather"}, "-explain -op allgather: allgather has one algorithm (the ring)"},
		{[]string{"-calib-max", "1K"}, "-calib-max applies to -calibrate only"},
	} {
		_, err := runBench(t, append(c.args, "-max", "64")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestSimCores: with -cores the simulator bounds each collective by its
// busiest node's work (sim.Config.Cores, at the AlignClocks that ends it)
// as the formulas do: on 8 ranks sharing 2 cores, every all-reduce
// algorithm's simulated time is its prediction (ratio 1 within 1%, which
// the bound makes exact at 16 MiB, where it binds), no faster than
// without the bound, and every collective stays checked.
//
// The timed sweeps run timing-only (-sim-payload none: the simulated time
// does not depend on the payload, only on the bytes accounted) with one
// iteration and no warm-up (virtual time is the same every iteration): the
// real 16 MiB payloads of 8 ranks, allocated and checked twice, were most
// of this test's time, and under a loaded CI a single such sweep passed
// runBench's deadline. The payload under the bound is checked by the
// smaller real sweeps below, all-reduce included.
func TestSimCores(t *testing.T) {
	if raceEnabled {
		// The simulator's own tests (allreduce/sim, Cores included) run
		// under -race; this one is the command's arithmetic.
		t.Skip("the command's arithmetic: runs in the plain go test")
	}
	rows := func(args ...string) []map[string]any {
		t.Helper()
		out, err := runBench(t, append([]string{"-transport", "sim", "-ranks", "8", "-min", "4K", "-max", "64M", "-factor", "16", "-json"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return jsonObjects(t, out)
	}
	timed := []string{"-algo", "ring,tree,hd,doubling", "-sim-payload", "none", "-iters", "1", "-warmup", "0"}
	bound, free := rows(append(timed, "-cores", "2")...), rows(timed...)
	if len(bound) != 16 || len(free) != len(bound) {
		t.Fatalf("%d rows with -cores 2, %d without: want 16 each (4 algorithms, 4 sizes)", len(bound), len(free))
	}
	for i, r := range bound {
		if ratio := num(t, r, "ratio"); math.Abs(ratio-1) > 0.01 {
			t.Errorf("-cores 2, %v at %v B: measured/predicted %v", r["algo"], r["bytes"], ratio)
		}
		if num(t, r, "time_us") < num(t, free[i], "time_us") {
			t.Errorf("%v at %v B: %v µs with -cores 2, %v µs without", r["algo"], r["bytes"], r["time_us"], free[i]["time_us"])
		}
	}
	for _, op := range []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter"} {
		args := []string{"-op", op, "-cores", "2", "-sim-payload", "real", "-max", "1M", "-iters", "2", "-warmup", "1"}
		if op == "allreduce" {
			args = append(args, "-algo", "ring,tree,hd,doubling")
		}
		for _, r := range rows(args...) {
			if num(t, r, "wrong") != 0 {
				t.Errorf("%s with -cores 2 at %v B: wrong %v", op, r["bytes"], r["wrong"])
			}
		}
	}
}
