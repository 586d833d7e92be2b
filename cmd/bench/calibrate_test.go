package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestCalibrate: -calibrate on in-process ranks with tiny sizes prints
// the fit and writes a profile that ReadProfile accepts, with a
// measurement of every runnable algorithm at every size, and a refit with
// the cores given (-cores 3) and without, the better kept.
func TestCalibrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	out, err := runBench(t, "-calibrate", path, "-ranks", "3", "-calib-max", "64K",
		"-min", "1K", "-max", "8K", "-factor", "8", "-iters", "2", "-warmup", "0", "-cores", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range []string{"# alpha = ", "# beta  = ", "# gamma = ", "pred", "ratio", "profile written to " + path,
		"# cores bound (cost.Model.Cores): refitted rms prediction error "} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	p, err := cost.ReadProfile(path, allreduce.KnownMeasurement)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[int]string{0: "kept no bound", 3: "kept the bound of 3 cores"}[p.Model.Cores]
	if kept == "" || !strings.Contains(out, "% without: "+kept+"\n") {
		t.Errorf("profile with %d cores; the report says:\n%s", p.Model.Cores, out)
	}
	if p.Transport != "inproc" || p.Ranks != 3 || !(p.Model.Inter.Beta > 0) || p.Model.Intra != p.Model.Inter || !(p.Model.Gamma > 0) {
		t.Errorf("profile %+v", p)
	}
	got := map[string][]int{}
	for _, m := range p.Measurements {
		name := m.Algorithm
		if m.Collective != "" {
			name = m.Collective + "/" + name
		}
		got[name] = append(got[name], m.Bytes)
		if !(m.Seconds > 0) {
			t.Errorf("measurement %+v", m)
		}
	}
	// Every runnable all-reduce algorithm (auto aside), and Broadcast and
	// Reduce under each schedule.
	want := []string{"ring", "direct", "doubling", "tree", "hd", "broadcast/tree", "broadcast/chain", "reduce/tree", "reduce/chain"}
	for _, a := range want {
		if !slices.Equal(got[a], []int{1024, 8192}) {
			t.Errorf("%s measured at %v, want 1024 and 8192", a, got[a])
		}
	}
	if len(got) != len(want) {
		t.Errorf("measured %v, want %v", got, want)
	}
	for _, s := range []string{"op broadcast", "op reduce", "        chain "} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-transport", "sim"}, "-calibrate measures a real transport"},
		{[]string{"-ranks", "1"}, "-calibrate needs -ranks 2 or more"},
		{[]string{"-profile", path}, "-profile: -calibrate measures the model"},
		{[]string{"-inter-gbps", "10"}, "-inter-gbps: -calibrate measures the model"},
		{[]string{"-algo", "auto"}, "-algo auto: -calibrate measures the algorithms themselves"},
		{[]string{"-json"}, "leave out -json"},
		{[]string{"-explain"}, "-explain and -calibrate: give one"},
		{[]string{"-calib-max", "4"}, "-calib-max 4: need at least 8 bytes"},
		{[]string{"-cores", "-1"}, "-cores -1: need 0 or more"},
	} {
		_, err := runBench(t, append(c.args, "-calibrate", path, "-max", "64")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestRotatedRounds: each calibration round starts the algorithms one
// further along, and its rows are put back in the algorithms' order (each
// algorithm's sizes in order) for the medians.
func TestRotatedRounds(t *testing.T) {
	algos := []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.Tree}
	if got := rotated(algos, 4); !slices.Equal(got, []allreduce.Algorithm{allreduce.Doubling, allreduce.Tree, allreduce.Ring}) {
		t.Errorf("rotated by 4: %v", got)
	}
	if !slices.Equal(algos, []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.Tree}) {
		t.Errorf("rotated changed its argument: %v", algos)
	}
	rows := []row{{Algo: "tree", Bytes: 1}, {Algo: "tree", Bytes: 2}, {Algo: "ring", Bytes: 1}, {Algo: "ring", Bytes: 2}, {Algo: "doubling", Bytes: 1}}
	var got []string
	for _, r := range inAlgoOrder(rows, algos) {
		got = append(got, fmt.Sprintf("%s/%d", r.Algo, r.Bytes))
	}
	if want := []string{"ring/1", "ring/2", "doubling/1", "tree/1", "tree/2"}; !slices.Equal(got, want) {
		t.Errorf("in order: %v, want %v", got, want)
	}
}
