package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestExplain: per size, every algorithm that can run on the transport and
// shape with its prediction, and auto's pick, the least of them; nothing
// runs (tcp launches no rank).
func TestExplain(t *testing.T) {
	explainJSON(t)
	explainTable(t)
	explainPorts(t)
	explainNICs(t)
	explainCores(t)
}

// explainJSON checks -explain -json: every algorithm that can run
// predicted at every size, and auto's pick the least of them.
func explainJSON(t *testing.T) {
	for _, c := range []struct {
		args  []string
		algos []string
	}{
		{[]string{"-ranks", "8", "-local-size", "4"}, []string{"ring", "direct", "doubling", "tree", "hd", "hierarchical", "torus", "mesh"}},
		{[]string{"-ranks", "5"}, []string{"ring", "direct", "doubling", "tree", "hd"}},
		{[]string{"-transport", "tcp", "-ranks", "4"}, []string{"ring", "doubling", "tree", "hd", "hierarchical", "torus", "mesh"}},
		{[]string{"-transport", "sim", "-ranks", "1024", "-nodes", "128"}, []string{"ring", "doubling", "tree", "hd", "hierarchical", "torus", "mesh"}},
	} {
		out, err := runBench(t, append(c.args, "-explain", "-min", "8", "-max", "64M", "-factor", "8", "-json")...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 8 { // 8 B .. 16 MiB
			t.Fatalf("%v: %d lines, want 8:\n%s", c.args, len(lines), out)
		}
		for _, line := range lines {
			var e explanation
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			var got []string
			best := ""
			for a, us := range e.PredictedUS {
				got = append(got, a)
				if best == "" || us < e.PredictedUS[best] {
					best = a
				}
			}
			if want := slices.Sorted(slices.Values(c.algos)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
				t.Errorf("%v at %d B: algorithms %v, want %v", c.args, e.Bytes, got, want)
			}
			// The pick is the least predicted time; within allreduce.Choose's
			// tie tolerance (1e-9 relative: formulas that add the same terms
			// in other orders) it may be another algorithm than best.
			if e.PredictedUS[e.Pick] > e.PredictedUS[best]*(1+1e-9) {
				t.Errorf("%v at %d B: pick %s (%v us), fastest %s (%v us)", c.args, e.Bytes, e.Pick, e.PredictedUS[e.Pick], best, e.PredictedUS[best])
			}
		}
	}
}

// explainTable checks the -explain table's header and columns.
func explainTable(t *testing.T) {
	out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "64", "-nodes", "8", "-min", "1K", "-max", "1M", "-factor", "32")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"# model: inter 100 Gb/s (12.5 GB/s) α 5 µs; intra 1000 Gb/s (125 GB/s) α 1 µs", "8 nodes of up to 8 ranks", "hierarchical", "pick"} {
		if !strings.Contains(out, s) {
			t.Errorf("-explain table lacks %q:\n%s", s, out)
		}
	}
}

// explainPorts checks -ports in -explain.
func explainPorts(t *testing.T) {
	// -ports: the model's ports, said in the table's header and used by
	// Tree's prediction (4 MiB on 64 ranks: its sends to a parent and a
	// child overlap, so it is predicted faster).
	treeAt := func(args ...string) float64 {
		return predictedUS(t, append([]string{"-ranks", "64", "-min", "4M", "-max", "4M"}, args...)...)["tree"]
	}
	if one, three := treeAt(), treeAt("-ports", "3"); !(three < one) {
		t.Errorf("tree at 4 MiB on 64 ranks: %v µs with 3 ports, %v µs with none", three, one)
	}
	out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "8", "-max", "1K", "-ports", "2")
	if err != nil || !strings.Contains(out, "; ports 2 (simulator defaults with -ports)") {
		t.Errorf("-ports 2: %v\n%s", err, out)
	}
}

// explainNICs checks -nics in -explain.
func explainNICs(t *testing.T) {
	// -nics: said in the header; halving-doubling at 4 MiB on 64 ranks in
	// nodes of 8 predicted slower when a node's 8 ranks share one NIC
	// (its later steps cross from all of them at once), the ring not.
	hdRing := func(args ...string) (hd, ring float64) {
		p := predictedUS(t, append([]string{"-ranks", "64", "-nodes", "8", "-min", "4M", "-max", "4M"}, args...)...)
		return p["hd"], p["ring"]
	}
	hd0, ring0 := hdRing()
	hd1, ring1 := hdRing("-nics", "1")
	if !(hd1 > hd0) || ring1 != ring0 {
		t.Errorf("4 MiB on 64 ranks: hd %v µs, ring %v µs with a NIC per rank; hd %v µs, ring %v µs with -nics 1", hd0, ring0, hd1, ring1)
	}
	out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "8", "-nodes", "2", "-max", "1K", "-nics", "1")
	if err != nil || !strings.Contains(out, "a node's ranks share 1 NIC(s) (simulator defaults with -nics)") {
		t.Errorf("-nics 1: %v\n%s", err, out)
	}
	if out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "8", "-nics", "-1"); err == nil || !strings.Contains(out+err.Error(), "-nics -1") {
		t.Errorf("-nics -1: %v\n%s", err, out)
	}
}

// explainCores checks -cores in -explain.
func explainCores(t *testing.T) {
	// -cores: said in the header; on 8 ranks sharing 2 cores at 64 MiB
	// every algorithm is at least its work / 2, so the ring, hd and Tree
	// (equal bytes) are predicted alike and doubling (twice hd's bytes
	// sent on 8 ranks, more reduced) slower; without cores Tree's longer
	// schedule is slower than the ring's.
	noCores := predictedUS(t, "-ranks", "8", "-min", "64M", "-max", "64M", "-intra-alpha-us", "1")
	cores := predictedUS(t, "-ranks", "8", "-min", "64M", "-max", "64M", "-intra-alpha-us", "1", "-cores", "2")
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }
	if !(noCores["tree"] > 1.2*noCores["ring"]) || !near(cores["tree"], cores["ring"]) || !near(cores["hd"], cores["ring"]) ||
		!(cores["doubling"] > cores["hd"]) || !(cores["ring"] > noCores["ring"]) {
		t.Errorf("64 MiB on 8 ranks: %v without cores, %v with -cores 2", noCores, cores)
	}
	out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "8", "-max", "1K", "-cores", "2")
	if err != nil || !strings.Contains(out, "a node's ranks share 2 core(s) (simulator defaults with -cores)") {
		t.Errorf("-cores 2: %v\n%s", err, out)
	}
	if out, err := runBench(t, "-explain", "-transport", "sim", "-ranks", "8", "-cores", "-1"); err == nil || !strings.Contains(out+err.Error(), "-cores -1") {
		t.Errorf("-cores -1: %v\n%s", err, out)
	}
}

// predictedUS is every algorithm's predicted time in µs that `-explain
// -json -transport sim` gives with args, for one size.
func predictedUS(t *testing.T, args ...string) map[string]float64 {
	t.Helper()
	out, err := runBench(t, append([]string{"-explain", "-json", "-transport", "sim"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		PredictedUS map[string]float64 `json:"predicted_us"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return e.PredictedUS
}

// TestProfileModel: the model comes from -profile, else $RINGDDP_PROFILE,
// with the model flags on top.
func TestProfileModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	m := cost.Model{
		Intra: cost.Link{Alpha: 1e-6, Beta: 1e-10},
		Inter: cost.Link{Alpha: 3e-6, Beta: 1e-9},
		Gamma: 1e-10,
	}
	if err := cost.WriteProfile(path, cost.Profile{Transport: "tcp", Ranks: 4, Model: m}); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"-profile", path, "-alpha-us", "7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := m
	want.Inter.Alpha = 7e-6
	if cfg.model == nil || *cfg.model != want || !strings.Contains(cfg.modelFrom, path+" with -alpha-us") {
		t.Errorf("model %+v from %q, want %+v", cfg.model, cfg.modelFrom, want)
	}
	t.Setenv(cost.ProfileEnv, path)
	cfg, err = parseConfig([]string{"-transport", "sim"}, nil)
	if err != nil || cfg.model == nil || *cfg.model != m {
		t.Errorf("$%s: model %+v, %v", cost.ProfileEnv, cfg.model, err)
	}
	t.Setenv(cost.ProfileEnv, "")
	if cfg, err = parseConfig(nil, nil); err != nil || cfg.model != nil {
		t.Errorf("no profile, no flags: model %+v, %v (want none)", cfg.model, err)
	}

	// A run with a model has the prediction columns.
	out, err := runBench(t, "-profile", path, "-ranks", "3", "-min", "1K", "-max", "1K", "-factor", "1", "-iters", "2", "-warmup", "0")
	if err != nil || !strings.Contains(out, "pred") || !strings.Contains(out, "ratio") {
		t.Errorf("run with -profile: %v\n%s", err, out)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestExplainRooted: -explain -op broadcast and reduce predict the tree
// and the chain and pick what the group runs: over 4 tcp ranks with the
// default model, the tree at 64 KiB and the chain at 64 MiB; on 2 ranks
// there is no chain.
func TestExplainRooted(t *testing.T) {
	for _, op := range []string{"broadcast", "reduce"} {
		out, err := runBench(t, "-explain", "-json", "-op", op, "-transport", "tcp", "-ranks", "4", "-min", "64K", "-max", "64M", "-factor", "1024")
		if err != nil {
			t.Fatal(err)
		}
		var picks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var e explanation
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%s: %q: %v", op, line, err)
			}
			if !(e.PredictedUS["tree"] > 0 && e.PredictedUS["chain"] > 0) {
				t.Errorf("%s %d B: predictions %v", op, e.Bytes, e.PredictedUS)
			}
			picks = append(picks, e.Pick)
		}
		if strings.Join(picks, ",") != "tree,chain" {
			t.Errorf("%s: picks %v at 64 KiB and 64 MiB, want tree, chain", op, picks)
		}
		out, err = runBench(t, "-explain", "-json", "-op", op, "-transport", "tcp", "-ranks", "2", "-min", "64M", "-max", "64M")
		if err != nil {
			t.Fatal(err)
		}
		var e explanation
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil || e.Pick != "tree" || len(e.PredictedUS) != 1 {
			t.Errorf("%s on 2 ranks: %q, %v; want the tree alone", op, out, err)
		}
	}
}
