package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// The rings of a calibration across nodes: within each node (a node of
// one rank idle), one rank a node over the nodes, and every local rank
// over the nodes, each rank's neighbours on its own ring.
func TestLinkRings(t *testing.T) {
	s := cost.NodesShape(7, 3) // nodes {0,1,2} {3,4,5} {6}
	type nb struct {
		right, left int
		ok          bool
	}
	for _, c := range []struct {
		name string
		ring exchangeRing
		want map[int]nb
	}{
		{"intra", intraRing(s), map[int]nb{0: {1, 2, true}, 2: {0, 1, true}, 4: {5, 3, true}, 6: {0, 0, false}}},
		{"inter", interRing(s, false), map[int]nb{0: {3, 6, true}, 3: {6, 0, true}, 6: {0, 3, true}, 1: {0, 0, false}}},
		{"inter all", interRing(s, true), map[int]nb{0: {3, 6, true}, 1: {4, 4, true}, 4: {1, 1, true}, 5: {2, 2, true}}},
	} {
		for r, w := range c.want {
			right, left, ok := c.ring.peers(r, 7)
			if ok != w.ok || ok && (right != w.right || left != w.left) {
				t.Errorf("%s: rank %d: right %d left %d ok %v, want %+v", c.name, r, right, left, ok, w)
			}
		}
	}
}

// The ring between nodes times its small messages after one that empties
// a token bucket (as a collective's pieces follow the pieces before them)
// and its mid-sized ones streamed; the ring within a node does neither.
func TestPrimeAndStream(t *testing.T) {
	s := cost.NodesShape(4, 2)
	inter, intra := interRing(s, false), intraRing(s)
	for _, c := range []struct {
		ring               exchangeRing
		b, largest         int
		wantPrime, wantRep int
	}{
		{inter, 8, 16 << 20, interStream, 100},
		{inter, 16 << 10, 16 << 20, interStream, 16},
		{inter, 16 << 10, 1 << 20, 1 << 20, 16}, // no larger than the largest message
		{inter, 32 << 10, 16 << 20, 0, interStream / (32 << 10)},
		{inter, 8 << 20, 16 << 20, 0, 1},
		{intra, 8, 16 << 20, 0, 100},
		{intra, 32 << 10, 16 << 20, 0, 8},
	} {
		if p, r := c.ring.primeBytes(c.b, c.largest), c.ring.reps(c.b); p != c.wantPrime || r != c.wantRep {
			t.Errorf("group %#x, %d-byte messages (largest %d): prime %d, reps %d; want %d, %d", c.ring.group, c.b, c.largest, p, r, c.wantPrime, c.wantRep)
		}
	}
}

// NICs from the rings between nodes: ranks that slow each other down by
// their number share one NIC; ranks that do not have a link each.
func TestFitNICs(t *testing.T) {
	for _, c := range []struct {
		local       int
		single, all float64
		want        int
	}{
		{2, 1, 2, 1},       // two ranks, each half as fast: one NIC
		{4, 1, 4.2, 1},     // four, a quarter as fast: one NIC
		{4, 1, 2, 2},       // four, half as fast: two NICs
		{2, 1, 1.05, 0},    // as fast as alone: a link per rank
		{1, 1, 5, 0},       // one rank a node: nothing shared
		{2, 0, 1, 0},       // nothing measured
		{3, 1, 30, 1},      // slower than one NIC explains: still one
		{2, 1, 1.4, 0},     // less than halfway to sharing: a link each
		{3, 1, 1.6, 2},     // three ranks at 1/1.6: two NICs
		{8, 1, 8.1, 1},     // eight ranks on one NIC
		{8, 1, 0.5, 0},     // faster together (noise): a link each
		{2, 1e-3, 2e-3, 1}, // seconds, not units
	} {
		if got := fitNICs(c.local, c.single, c.all); got != c.want {
			t.Errorf("fitNICs(%d, %v, %v) = %d, want %d", c.local, c.single, c.all, got, c.want)
		}
	}
}

// -calibrate across nodes (in process, -local-size simulating them):
// each link timed alone and reported, the profile of version 2 naming the
// layout and the links' transports, no refit (it fits one link).
func TestCalibrateAcrossNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.json")
	out, err := runBench(t, "-calibrate", path, "-ranks", "4", "-local-size", "2", "-calib-max", "2M",
		"-min", "1K", "-max", "8K", "-factor", "8", "-iters", "2", "-warmup", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range []string{"4 ranks on 2 nodes of 2: each link timed alone", "each node's ranks among themselves",
		"# model: intra = the link above", "one rank of each node (local rank 0) over the nodes", "# model: inter = the link above",
		"every local rank over the nodes at once", "the refit to the algorithms' times fits one link for both, so it is not run"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	p, err := cost.ReadProfile(path, allreduce.KnownMeasurement)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 2 || p.Nodes != 2 || p.LocalSize != 2 || p.IntraTransport != "inproc" || p.InterTransport != "inproc" ||
		!(p.Model.Intra.Beta > 0) || !(p.Model.Inter.Beta > 0) || p.Model.Intra == p.Model.Inter || !(p.Model.Gamma > 0) {
		t.Errorf("profile %+v", p)
	}
}
