package launch

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// -nnodes: N, MIN:MAX, and what is malformed, each named.
func TestParseNodes(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
		err    string
	}{
		{in: "2", lo: 2, hi: 2},
		{in: "1:2", lo: 1, hi: 2},
		{in: " 3:3 ", lo: 3, hi: 3},
		{in: "0", err: `the node count "0": want a number of nodes, 1..4096`},
		{in: "x", err: `the node count "x"`},
		{in: "3:2", err: "3:2: MIN (the nodes the job starts with) is more than MAX"},
		{in: "1:", err: `MAX "": want a number of nodes`},
		{in: ":2", err: `MIN ""`},
		{in: "1:2:3", err: `MAX "2:3"`},
		{in: "1:5000", err: `MAX "5000"`},
		{in: "-1:2", err: `MIN "-1"`},
	} {
		lo, hi, err := ParseNodes(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseNodes(%q): err %v, want one containing %q", c.in, err, c.err)
		case c.err == "" && (err != nil || lo != c.lo || hi != c.hi):
			t.Errorf("ParseNodes(%q) = %d, %d, %v; want %d, %d", c.in, lo, hi, err, c.lo, c.hi)
		}
	}
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if f.Nnodes != 1 || f.MostNodes() != 1 {
		t.Fatalf("default -nnodes: %d..%d, want 1", f.Nnodes, f.MostNodes())
	}
	if err := fs.Parse([]string{"-nnodes", "1:3"}); err != nil || f.Nnodes != 1 || f.MaxNodes != 3 || f.nodesText() != "1:3" {
		t.Fatalf("-nnodes 1:3: %v, %d..%d", err, f.Nnodes, f.MaxNodes)
	}
}

// Setup with -nnodes MIN:MAX: a -node-rank up to MAX-1, -master and the
// secret needed as soon as MAX > 1, and a rank's world any node count in
// MIN..MAX times -ranks.
func TestSetupScaleUp(t *testing.T) {
	sec := func(k string) string {
		if k == EnvSecret {
			return "s"
		}
		return ""
	}
	f := Flags{Nnodes: 1, MaxNodes: 2, NodeRank: 1, Master: "h:1"}
	if s, err := f.Setup(2, true, sec); err != nil || !s.Launcher || s.WorldSize != 2 {
		t.Fatalf("node 1 of 1:2: %+v, %v", s, err)
	}
	for _, c := range []struct {
		f      Flags
		getenv func(string) string
		err    string
	}{
		{Flags{Nnodes: 1, MaxNodes: 2, NodeRank: 2, Master: "h:1"}, sec, "-node-rank 2: out of range for -nnodes 1:2 (valid: 0..1)"},
		{Flags{Nnodes: 1, MaxNodes: 2}, sec, "-nnodes 1:2 needs -master"},
		{Flags{Nnodes: 1, MaxNodes: 2, Master: "h:1"}, func(string) string { return "" }, "RINGDDP_SECRET"},
	} {
		if _, err := c.f.Setup(2, true, c.getenv); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: err %v, want one containing %q", c.f, err, c.err)
		}
	}
	for world, ok := range map[int]bool{2: true, 4: true, 6: true, 8: false, 3: false} {
		getenv := func(k string) string {
			return map[string]string{"RANK": "1", "WORLD_SIZE": fmt.Sprint(world), "MASTER_ADDR": "127.0.0.1"}[k]
		}
		_, err := Flags{Nnodes: 1, MaxNodes: 3}.Setup(2, true, getenv)
		if (err == nil) != ok {
			t.Errorf("a rank of a world of %d under -nnodes 1:3 -ranks 2: err %v, want ok %v", world, err, ok)
		}
	}
}

// Node 0's refusals of a new node (growRefusal), each naming why: beyond
// MAX, another -nnodes, a node already admitted, a group over which the
// global batch cannot be split; and one it admits.
func TestGrowRefusal(t *testing.T) {
	r := &nodeRdzv{cfg: Config{Nnodes: 1, MaxNodes: 3, Ranks: 2}}
	s := &survival{e: &Elastic{Fits: func(n int) error {
		if n > 5 {
			return fmt.Errorf("the global batch 5 is smaller than %d ranks", n)
		}
		return nil
	}}, members: []int{0, 1}, joiners: map[int]*joiner{}}
	req := func(node, lo, hi int) rejoinRequest {
		return rejoinRequest{Node: node, Ranks: 2, Nnodes: lo, MaxNodes: hi}
	}
	for _, c := range []struct {
		req  rejoinRequest
		want string
	}{
		{req(3, 1, 4), "node 3 is beyond this job's -nnodes 1:3: it takes at most 3 nodes, -node-rank 0..2"},
		{req(1, 1, 2), "it runs -nnodes 1:2; the job's nodes run 1:3"},
		{req(1, 1, 3), ""},
		{req(1, 1, 3), "node 1 is in the job already"},
		{req(2, 1, 3), "the job cannot grow to 6 ranks: the global batch 5 is smaller than 6 ranks"},
	} {
		got := r.growRefusal(s, c.req)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("request %+v: %q, want %q", c.req, got, c.want)
		}
		if got == "" { // admitted: its ranks wait to join
			s.joiners[10], s.joiners[11] = &joiner{node: 1}, &joiner{node: 1}
		}
	}
	if !r.takenIn(1) || r.takenIn(1) {
		t.Fatal("node 1, admitted, is not taken in once")
	}
	if got := r.withAdded(nodePlan{Members: []int{0}}).Members; fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("members after the attempt: %v, want [0 1]", got)
	}
	r.notPending(2) // nothing pending: a no-op
}

// A grown generation's plan — 4 members of a job that started with 2, the
// two joined under names of 2.. — reads back as written.
func TestGenPlanGrown(t *testing.T) {
	p := genPlan{Gen: 1, Members: []int{0, 1, 2, 3}, Joined: []int{2, 3}}
	got, err := decodeGenPlan(p.encode(), 1, 2)
	if err != nil || fmt.Sprint(got.joinedRanks()) != "[2 3]" || len(got.Members) != 4 {
		t.Fatalf("%+v, %v", got, err)
	}
}

// A grown job's ranks take their local rank and local world size from the
// plan's nodes, not from the start's world: a job started on node 0 alone
// (2 ranks, each seeing the whole start world as local), node 1's two
// ranks taken in under names 2 and 3 (setNames, as addRemote records
// them on admission). The grown plan places them on node 1 (placeMembers), so every
// rank is local rank 0 or 1 of 2 — not of 4, as the start's world would
// say for node 0's ranks and the names for node 1's.
func TestGrownLocalRanks(t *testing.T) {
	place := &nodePlace{members: []int{0}, perNode: 2, most: 2}
	place.setNames(1, []int{2, 3})
	s := &survival{world: 2, place: place}
	p := genPlan{Gen: 1, Members: []int{0, 1, 2, 3}, Joined: []int{2, 3}}
	s.placeMembers(&p)
	if fmt.Sprint(p.Nodes) != "[0 0 1 1]" {
		t.Fatalf("the grown plan's nodes: %v, want [0 0 1 1]", p.Nodes)
	}
	got, err := decodeGenPlan(p.encode(), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node0 := rendezvous.Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2}
	node1 := rendezvous.Env{Rank: 2, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2} // as its launcher starts it (rankEnv)
	for _, c := range []struct {
		start rendezvous.Env
		name  int
		want  [4]int // rank, world, local rank, local world
	}{
		{node0, 1, [4]int{1, 4, 1, 2}},
		{node0, 0, [4]int{0, 4, 0, 2}},
		{node1, 2, [4]int{2, 4, 0, 2}},
		{node1, 3, [4]int{3, 4, 1, 2}},
	} {
		env := generationEnv(c.start, c.name, got.Members, got.Nodes)
		if g := [4]int{env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize}; g != c.want {
			t.Errorf("name %d: rank, world, local rank, local world %v, want %v", c.name, g, c.want)
		}
	}
}
