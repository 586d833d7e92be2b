package cost_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// A message costs α plus its bytes at the β of the regime its size falls
// in: small, cache, then large.
func TestLinkRegimes(t *testing.T) {
	l := cost.Link{Alpha: 1e-6, Beta: 4e-9, CacheBeta: 2e-9, CacheBytes: 1 << 20, SmallBeta: 1e-9, SmallBytes: 1 << 10}
	for _, c := range []struct {
		b    float64
		beta float64
	}{{1 << 10, 1e-9}, {1<<10 + 1, 2e-9}, {1 << 20, 2e-9}, {1<<20 + 1, 4e-9}} {
		if got := l.Transfer(c.b); got != c.b*c.beta {
			t.Errorf("Transfer(%v) = %v, want %v", c.b, got, c.b*c.beta)
		}
		if got := l.Time(c.b); got != l.Alpha+c.b*c.beta {
			t.Errorf("Time(%v) = %v, want %v", c.b, got, l.Alpha+c.b*c.beta)
		}
	}
	// Shared by 3 on one NIC: the NIC carries the three back to back.
	if got, want := l.Shared(3).Time(1<<21), 3*(1<<21)*4e-9; math.Abs(got-want) > 1e-12*want {
		t.Errorf("shared Time = %v, want %v", got, want)
	}
}

// Validate names the parameter out of range, and wraps ErrInvalid.
func TestValidate(t *testing.T) {
	if err := cost.DefaultModel(false).Validate(); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]cost.Model{
		"gamma_s_per_byte":  {Gamma: -1},
		"inter.alpha_s":     {Inter: cost.Link{Alpha: math.NaN()}},
		"ports":             {Ports: -1},
		"segment_bytes":     {Segment: -1},
		"cache_work":        {CacheWork: math.Inf(1)},
		"intra.small_bytes": {Intra: cost.Link{SmallBytes: -1}},
	} {
		err := m.Validate()
		if !errors.Is(err, cost.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

// NodesShape puts the remainder on a last, smaller node.
func TestNodesShape(t *testing.T) {
	s := cost.NodesShape(7, 3)
	if s.Nodes != 3 || s.LocalSize != 3 || s.SmallestNode != 1 || !s.Topology {
		t.Fatalf("NodesShape(7, 3) = %+v", s)
	}
	if got := s.NodeOfRank(6); got != 2 {
		t.Errorf("rank 6 on node %d", got)
	}
	if s.SlotsPerRank() != 3 || s.SmallestShape().Ranks != 1 {
		t.Errorf("slots %d, smallest %+v", s.SlotsPerRank(), s.SmallestShape())
	}
	if f := cost.FlatShape(4); f.Nodes != 1 || f.LocalSize != 4 || f.Topology {
		t.Errorf("FlatShape(4) = %+v", f)
	}
}

// The cores bound: the busiest node's work over the cores, or the
// schedule's time when that is longer.
func TestBounded(t *testing.T) {
	m := cost.Model{Intra: cost.Link{Beta: 1e-9}, Inter: cost.Link{Beta: 1e-9}, Gamma: 1e-10, Cores: 2}
	w := cost.NewWork(m, cost.FlatShape(2))
	w.Send(0, 1, 1000, 2)
	w.Reduce(1, 1000)
	want := 2*1000*1e-9 + 1000*1e-10
	if got := w.Busiest(); math.Abs(got-want) > 1e-18 {
		t.Fatalf("Busiest = %v, want %v", got, want)
	}
	if got := m.Bounded(0, w.Busiest(), 1000); math.Abs(got-want/2) > 1e-12*want {
		t.Errorf("Bounded = %v, want %v", got, want/2)
	}
	m.Cores = 0
	if got := m.Bounded(1, w.Busiest(), 1000); got != 1 {
		t.Errorf("no cores: Bounded = %v, want the schedule's 1", got)
	}
}

// A profile reads back as written; the check of names is the caller's.
func TestProfileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	p := cost.Profile{Transport: "tcp", Ranks: 4, Model: cost.DefaultModel(false),
		Measurements: []cost.Measurement{{Algorithm: "anything", Bytes: 8, Seconds: 1e-5}}}
	if err := cost.WriteProfile(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := cost.ReadProfile(path, nil)
	if err != nil || got.Model != p.Model || got.Version != cost.ProfileVersion || len(got.Measurements) != 1 {
		t.Fatalf("read %+v, %v", got, err)
	}
	refuse := errors.New("unknown")
	if _, err := cost.ReadProfile(path, func(cost.Measurement) error { return refuse }); !errors.Is(err, refuse) {
		t.Errorf("known refusing: %v", err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 1, "model": {}, "measurements": [{"algorithm": "ring", "bytes": 8, "seconds": -1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cost.ReadProfile(path, nil); err == nil {
		t.Error("a negative time read as a profile")
	}
}

// A two-link profile (version 2: timed across nodes) reads back with its
// links and how each was measured.
func TestTwoLinkProfileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bed.json")
	want := cost.Profile{Transport: "auto", Ranks: 6, Nodes: 3, LocalSize: 2, IntraTransport: "shm", InterTransport: "tcp",
		Model: cost.Model{
			Intra: cost.Link{Alpha: 3e-6, Beta: 1 / 2e9, SmallBeta: 1 / 5e9, SmallBytes: 512 << 10},
			Inter: cost.Link{Alpha: 60e-6, Beta: 1 / 0.117e9},
			Gamma: 1 / 8e9, Ports: 2, Segment: 256 << 10, NICs: 1,
		}}
	if err := cost.WriteProfile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := cost.ReadProfile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	want.Version = cost.ProfileVersion
	if got.Model != want.Model || got.Nodes != 3 || got.LocalSize != 2 || got.IntraTransport != "shm" || got.InterTransport != "tcp" || got.Version != 2 {
		t.Fatalf("read back %+v, wrote %+v", got, want)
	}
}

// Profiles of version 1 (one host, written before the links were told
// apart) still load, as one host's: Nodes 1, Intra = Inter over their
// transport; a newer version, or none, is refused naming the version.
func TestProfileVersions(t *testing.T) {
	for _, name := range []string{"tcp-4.json", "shm-4.json", "inproc-4.json"} {
		p, err := cost.ReadProfile(filepath.Join("..", "testdata", "profiles", name), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Version != 1 || p.Nodes != 1 || p.LocalSize != p.Ranks || p.IntraTransport != p.Transport || p.InterTransport != "" || p.Model.Intra != p.Model.Inter {
			t.Errorf("%s: read as %+v", name, p)
		}
	}
	dir := t.TempDir()
	for body, want := range map[string]string{
		`{"version": 3, "model": {}}`:             "version 3, this build reads versions 1 to 2",
		`{"model": {}}`:                           "no version",
		`{"version": 2, "nodes": 2, "model": {}}`: "inter-node link's transport",
	} {
		path := filepath.Join(dir, "p.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := cost.ReadProfile(path, nil)
		if !errors.Is(err, cost.ErrInvalid) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: ReadProfile = %v, want an error naming the file and %q", body, err, want)
		}
	}
}
