package allreduce_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// randomModel is a model with links between 100 ns and 1 ms per message
// and 0.1 to 1000 GB/s.
func randomModel(rng *rand.Rand) cost.Model {
	link := func() cost.Link {
		return cost.Link{Alpha: 1e-7 * float64(int(1)<<rng.IntN(14)), Beta: 1 / (1e8 * float64(int(1)<<rng.IntN(14)))}
	}
	return cost.Model{Intra: link(), Inter: link(), Gamma: 1 / (1e8 * float64(int(1)<<rng.IntN(10)))}
}

// Auto never picks an algorithm the group cannot run, whatever the model,
// shape and size. A pure function of its inputs: under the race detector
// (no goroutines here to check, and ten times the time) a hundredth of the
// cases.
func TestChooseMeetsRequirements(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := 3000
	if raceEnabled {
		cases = 30
	}
	for i := 0; i < cases; i++ {
		m := randomModel(rng)
		n := 1 + rng.IntN(300)
		s := cost.NodesShape(n, rng.IntN(n+1))
		if rng.IntN(3) == 0 {
			s.Topology = false
			s.Nodes, s.LocalSize = 1, n
		}
		s.PeerMemory = rng.IntN(2) == 0
		b := 0
		if k := rng.IntN(30); k > 0 {
			b = 1<<k + rng.IntN(1<<k)
		}
		a := allreduce.Choose(m, s, b)
		var runnable []allreduce.Algorithm
		for _, p := range allreduce.Predict(m, s, b) {
			runnable = append(runnable, p.Algorithm)
			if !(p.Seconds >= 0) {
				t.Fatalf("%+v, %d bytes: %v predicted %v s", s, b, p.Algorithm, p.Seconds)
			}
		}
		ok := false
		for _, r := range runnable {
			ok = ok || r == a
		}
		if !ok {
			t.Fatalf("%+v, %d bytes: Auto picked %v, which cannot run there (runnable: %v)", s, b, a, runnable)
		}
		if !s.PeerMemory && a == allreduce.Direct || !s.Topology && (a == allreduce.Hierarchical || a == allreduce.Torus || a == allreduce.Mesh) {
			t.Fatalf("%+v: picked %v", s, a)
		}
	}
}

// A group's Auto follows its model: a model where messages are dear and
// bytes cheap picks a latency algorithm for every size; one where bytes
// are dear picks a bandwidth-optimal one for large buffers.
func TestAutoFollowsModel(t *testing.T) {
	conns, _, err := allreducetest.InprocConns(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	latency := cost.Model{Intra: cost.Link{Alpha: 1e-3, Beta: 1e-15}, Inter: cost.Link{Alpha: 1e-3, Beta: 1e-15}, Gamma: 1e-15}
	g, err := allreduce.NewGroup(plainConn{conns[0]}, allreduce.WithModel(latency))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{8, 1 << 20, 1 << 28} {
		if a := g.AlgorithmFor(b); a != allreduce.Doubling {
			t.Errorf("latency-bound model, %d bytes: Auto runs %v, want doubling", b, a)
		}
	}
	bandwidth := cost.Model{Intra: cost.Link{Alpha: 1e-9, Beta: 1e-9}, Inter: cost.Link{Alpha: 1e-9, Beta: 1e-9}, Gamma: 1e-9}
	g2, err := allreduce.NewGroup(plainConn{conns[1]}, allreduce.WithModel(bandwidth))
	if err != nil {
		t.Fatal(err)
	}
	if a := g2.AlgorithmFor(1 << 26); a == allreduce.Doubling || a == allreduce.Tree {
		t.Errorf("bandwidth-bound model, 64 MiB: Auto runs %v, want a bandwidth-optimal algorithm", a)
	}
	bad := latency
	bad.Gamma = -1
	if _, err := allreduce.NewGroup(conns[2], allreduce.WithModel(bad)); err == nil || !strings.Contains(err.Error(), "gamma") {
		t.Errorf("negative γ: NewGroup error %v, want one naming gamma", err)
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

func TestProfileFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	want := cost.Profile{Transport: "tcp", Ranks: 4, Model: cost.DefaultModel(false),
		Measurements: []cost.Measurement{{Algorithm: "ring", Bytes: 1024, Seconds: 1e-4}}}
	if err := cost.WriteProfile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := cost.ReadProfile(path, allreduce.KnownMeasurement)
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != want.Model || got.Ranks != 4 || len(got.Measurements) != 1 || got.Version != cost.ProfileVersion {
		t.Fatalf("read back %+v, wrote %+v", got, want)
	}
	p, ok, err := cost.ProfileFromEnv(func(k string) string {
		if k == cost.ProfileEnv {
			return path
		}
		return ""
	}, allreduce.KnownMeasurement)
	if err != nil || !ok || p.Model != want.Model {
		t.Fatalf("ProfileFromEnv: %+v %v %v", p, ok, err)
	}
	if _, ok, err := cost.ProfileFromEnv(func(string) string { return "" }, nil); ok || err != nil {
		t.Fatalf("unset env: ok %v err %v", ok, err)
	}
	for name, body := range map[string]string{
		"garbage":   "not json",
		"version":   `{"version": 9, "model": {}}`,
		"negative":  `{"version": 1, "model": {"intra": {"alpha_s": -1}}}`,
		"ports":     `{"version": 1, "model": {"ports": -1}}`,
		"nics":      `{"version": 1, "model": {"nics": -2}}`,
		"cores":     `{"version": 1, "model": {"cores": -1}}`,
		"exchange":  `{"version": 1, "model": {"exchange_work": -0.5}}`,
		"lone":      `{"version": 1, "model": {"lone_alpha": -0.7}}`,
		"cache":     `{"version": 1, "model": {"cache_work": -0.8}}`,
		"cachesize": `{"version": 1, "model": {"cache_work_bytes": -1}}`,
		"small":     `{"version": 1, "model": {"inter": {"small_bytes": -8}}}`,
		"algorithm": `{"version": 1, "model": {}, "measurements": [{"algorithm": "bogus", "bytes": 8, "seconds": 1}]}`,
		"time":      `{"version": 1, "model": {}, "measurements": [{"algorithm": "ring", "bytes": 8, "seconds": -1}]}`,
		"schedule":  `{"version": 1, "model": {}, "measurements": [{"collective": "broadcast", "algorithm": "ring", "bytes": 8, "seconds": 1}]}`,
		"auto":      `{"version": 1, "model": {}, "measurements": [{"collective": "reduce", "algorithm": "auto", "bytes": 8, "seconds": 1}]}`,
		"kind":      `{"version": 1, "model": {}, "measurements": [{"collective": "alltoall", "algorithm": "ring", "bytes": 8, "seconds": 1}]}`,
	} {
		bad := filepath.Join(dir, name+".json")
		if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := cost.ReadProfile(bad, allreduce.KnownMeasurement); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: ReadProfile error %v, want one naming the file", name, err)
		}
	}
}

// A profile written before Ports and the small-message regime existed
// reads as the model it was: Ports 0 (a send holds its rank) and no small
// regime, so its predictions are the ones it made then; a profile with
// them reads them back.
func TestProfileCompatibility(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	body := `{"version": 1, "transport": "tcp", "ranks": 4, "model": {
		"intra": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "cache_beta_s_per_byte": 5e-10, "cache_bytes": 524288},
		"inter": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "cache_beta_s_per_byte": 5e-10, "cache_bytes": 524288},
		"gamma_s_per_byte": 2e-10}}`
	if err := os.WriteFile(old, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := cost.ReadProfile(old, allreduce.KnownMeasurement)
	if err != nil {
		t.Fatal(err)
	}
	l := cost.Link{Alpha: 1e-5, Beta: 1e-9, CacheBeta: 5e-10, CacheBytes: 512 << 10}
	if want := (cost.Model{Intra: l, Inter: l, Gamma: 2e-10}); p.Model != want {
		t.Fatalf("old profile read as %+v, want %+v", p.Model, want)
	}
	m := p.Model
	m.Ports = 3
	m.Intra.SmallBeta, m.Intra.SmallBytes = 1e-10, 32<<10
	path := filepath.Join(dir, "new.json")
	if err := cost.WriteProfile(path, cost.Profile{Transport: "tcp", Ranks: 4, Model: m}); err != nil {
		t.Fatal(err)
	}
	if got, err := cost.ReadProfile(path, allreduce.KnownMeasurement); err != nil || got.Model != m {
		t.Fatalf("read back %+v (%v), wrote %+v", got.Model, err, m)
	}
	// The small regime costs its own β; Ports 0 and 1 give Tree on two
	// ranks (one link each way) the same time, more ports never more.
	small, _ := allreduce.PredictAlgorithm(m, cost.FlatShape(4), allreduce.Ring, 16<<10)
	m2 := m
	m2.Intra.SmallBytes = 0
	cached, _ := allreduce.PredictAlgorithm(m2, cost.FlatShape(4), allreduce.Ring, 16<<10)
	if !(small < cached) {
		t.Errorf("ring at 16 KiB: %v s with the small regime, %v s without", small, cached)
	}
	for _, n := range []int{2, 4, 7, 16} {
		prev := math.Inf(1)
		for ports := 0; ports <= n; ports++ {
			m.Ports = ports
			tree, ok := allreduce.PredictAlgorithm(m, cost.FlatShape(n), allreduce.Tree, 4<<20)
			if !ok || tree > prev*(1+1e-12) {
				t.Errorf("n=%d: Tree %v s with %d ports, %v s with one fewer", n, tree, ports, prev)
			}
			prev = tree
		}
	}
}
