package launch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// goodPlan is a valid restart plan of a job of 2 nodes of 1 rank.
func goodPlan() nodePlan {
	return nodePlan{Attempt: 1, RunID: "job-restart1", StorePort: 40000, Members: []int{0, 1}, RanksPerNode: 1,
		Step: 30, From: "/ck/ck-000030.safetensors", Found: true, Notes: []string{"skipped x"},
		Failure: &planFailure{Node: 1, Rank: 1, Pid: 42, Reason: "exited with status 3", Step: 35}}
}

// Every hostile field of a plan is an error naming the field, never a
// panic; texts that pass are made printable.
func TestCheckPlan(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(p *nodePlan)
		want string // "" accepted
	}{
		{"good", func(p *nodePlan) {}, ""},
		{"last plan", func(p *nodePlan) { *p = nodePlan{Attempt: 1, Err: "launch: out of restarts"} }, ""},
		{"wrong attempt", func(p *nodePlan) { p.Attempt = 7 }, "attempt 7: want 1"},
		{"negative ranks", func(p *nodePlan) { p.RanksPerNode = -1 }, "ranks_per_node -1: want this node's -ranks 1"},
		{"40 ranks", func(p *nodePlan) { p.RanksPerNode = 40 }, "ranks_per_node 40: want this node's -ranks 1"},
		{"8 ranks", func(p *nodePlan) { p.Members = []int{0, 1}; p.RanksPerNode = 4 }, "ranks_per_node 4"},
		{"duplicated member", func(p *nodePlan) { p.Members = []int{0, 1, 1} }, "members: 3 nodes, want 1..2"},
		{"duplicated member in range", func(p *nodePlan) { p.Members = []int{0, 0} }, "members: node 0 appears twice"},
		{"member out of range", func(p *nodePlan) { p.Members = []int{0, 5} }, "members: node 5 out of range 0..1"},
		{"negative member", func(p *nodePlan) { p.Members = []int{0, -1} }, "members: node -1 out of range"},
		{"without node 0", func(p *nodePlan) { p.Members = []int{1} }, "members: 1: node 0 must come first"},
		{"no members", func(p *nodePlan) { p.Members = nil }, "members: 0 nodes"},
		{"port 9", func(p *nodePlan) { p.StorePort = 9 }, "store_port 9: want 1024..65535"},
		{"port 0", func(p *nodePlan) { p.StorePort = 0 }, "store_port 0"},
		{"port 70000", func(p *nodePlan) { p.StorePort = 70000 }, "store_port 70000"},
		{"run id with controls", func(p *nodePlan) { p.RunID = "job\x1b[2J\n" }, `run_id "job?[2J?": want 1..128 printable bytes`},
		{"empty run id", func(p *nodePlan) { p.RunID = "" }, "run_id"},
		{"long run id", func(p *nodePlan) { p.RunID = strings.Repeat("a", 129) }, "run_id"},
		{"negative step", func(p *nodePlan) { p.Step = -5 }, "step -5"},
		{"from with controls", func(p *nodePlan) { p.From = "ck\x00" }, "from"},
		{"from ..", func(p *nodePlan) { p.From = "/ck/.." }, "from \"/ck/..\": names no file"},
		{"too many notes", func(p *nodePlan) { p.Notes = make([]string, 1000) }, "notes: 1000"},
		{"failure node", func(p *nodePlan) { p.Failure.Node = 9 }, "failure.node 9"},
		{"failure rank", func(p *nodePlan) { p.Failure.Rank = 1 << 30 }, "failure.rank"},
		{"dropped node 0", func(p *nodePlan) { p.Dropped = []DroppedNode{{Node: 0}} }, "dropped[0]: node 0"},
		{"huge err", func(p *nodePlan) { *p = nodePlan{Attempt: 1, Err: strings.Repeat("x", maxErrLen+1)} }, "err: 65537 bytes"},
		{"done and err", func(p *nodePlan) { p.Done, p.Err = true, "x" }, "done and err"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := goodPlan()
			c.edit(&p)
			err := checkPlan(&p, 1, 2, 1)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("checkPlan = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// Texts another launcher wrote come out printable.
	p := goodPlan()
	p.Failure.Reason = "exited\x1b]0;owned\x07 with status 3"
	p.Notes = []string{"skipped \x1b[31mred"}
	if err := checkPlan(&p, 1, 2, 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(p.Notes, p.Failure.Reason) {
		if strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("text %q still holds control characters", s)
		}
	}
}

func TestCheckReportAndStop(t *testing.T) {
	rep := nodeReport{Node: 1, Ranks: 2, Attempt: 0, Fail: &wireFailure{Rank: 3, Pid: 9, Reason: "a\nb", Seq: 1}}
	if err := checkReport(&rep, 1, 0); err != nil || rep.Fail.Reason != "a?b" {
		t.Fatalf("checkReport = %v, reason %q", err, rep.Fail.Reason)
	}
	for _, c := range []struct {
		rep  nodeReport
		want string
	}{
		{nodeReport{Node: 2, Ranks: 1, Attempt: 0}, "node 2: want 1"},
		{nodeReport{Node: 1, Ranks: 1, Attempt: 3}, "attempt 3: want 0"},
		{nodeReport{Node: 1, Ranks: -1, Attempt: 0}, "ranks -1"},
		{nodeReport{Node: 1, Ranks: 1, Attempt: 0, Fail: &wireFailure{Seq: -2}}, "fail.seq -2"},
	} {
		if err := checkReport(&c.rep, 1, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkReport(%+v) = %v, want %q", c.rep, err, c.want)
		}
	}
	m := stopMsg{Node: 5, Rank: 1}
	if err := checkStop(&m, 2); err == nil || !strings.Contains(err.Error(), "node 5") {
		t.Errorf("checkStop = %v", err)
	}
}

// What a rank holds — the secret its launcher derived for the ranks — opens
// neither the launchers' store nor a plan they accept: a plan injected by
// such a client ("restart 1 on 8 ranks") is refused, naming why.
func TestPlanInjectedByRankRefused(t *testing.T) {
	t.Parallel()
	const secret = "the job's secret, launchers only"
	srv, err := rendezvous.ListenStore("127.0.0.1:0", rendezvous.StoreConfig{Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := srv.Addr().String()

	// The rank's secret does not open the launchers' store.
	rankCfg := rendezvous.StoreConfig{Secret: []byte(rankSecret(secret)), Timeout: 5 * time.Second}
	if _, err := rendezvous.DialStore(ctx, addr, rankCfg); !errors.Is(err, rendezvous.ErrAuth) {
		t.Fatalf("a rank's client joined the launchers' store: %v", err)
	}

	// Nor does it make a plan the launchers accept, even written into
	// their store (by a relay, say): sealed under what a rank can derive.
	st, err := rendezvous.DialStore(ctx, addr, rendezvous.StoreConfig{Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stderr := &lockedBuffer{}
	cfg := Config{Ranks: 1, Nnodes: 2, NodeRank: 1, Master: addr, joinReport: time.Second}
	follower := &nodeRdzv{cfg: cfg, e: &Elastic{JoinTimeout: time.Second, RejoinTimeout: time.Second}, w: outputs{errOut: &syncWriter{w: stderr}},
		store: st, seal: newSealer(secret), node: 1}
	injected := goodPlan()
	injected.Members, injected.RanksPerNode, injected.StorePort = []int{0, 1}, 4, 9
	b, _ := json.Marshal(injected)
	for _, forger := range []sealer{{}, newSealer(rankSecret(secret)), {key: []byte(rankSecret(secret))}} {
		k := follower.key(1, "plan")
		if err := st.Set(ctx, k, forger.seal(k, b)); err != nil {
			t.Fatal(err)
		}
		_, err := follower.rendezvous(ctx, 1, nodeReport{Node: 1, Ranks: 1, Attempt: 0})
		if err == nil || !strings.Contains(err.Error(), "refusing node 0's plan for attempt 2 (elastic/1/plan)") ||
			!strings.Contains(err.Error(), "MAC does not check") {
			t.Errorf("injected plan: %v, want it refused naming its MAC", err)
		}
	}
	// A plan sealed by a launcher but with a hostile field is refused too.
	k := follower.key(1, "plan")
	if err := st.Set(ctx, k, newSealer(secret).seal(k, b)); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.rendezvous(ctx, 1, nodeReport{Node: 1, Ranks: 1, Attempt: 0}); err == nil || !strings.Contains(err.Error(), "ranks_per_node 4: want this node's -ranks 1") {
		t.Errorf("hostile plan: %v", err)
	}

	// A forged stop request is ignored, and said so.
	stop := make(chan string, 1)
	ks := follower.key(1, "stop")
	sb, _ := json.Marshal(stopMsg{Node: 0, Rank: 0, Reason: "forged"})
	if err := st.Set(ctx, ks, newSealer(rankSecret(secret)).seal(ks, sb)); err != nil {
		t.Fatal(err)
	}
	follower.watchStop(ctx, 1, stop)
	if len(stop) != 0 || !strings.Contains(stderr.String(), "ignoring a stop request that does not check (elastic/1/stop)") {
		t.Errorf("forged stop: %d requests passed on; stderr:\n%s", len(stop), stderr.String())
	}
}
