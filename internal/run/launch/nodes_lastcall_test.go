package launch

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// The last call (nodes_lastcall.go) without ranks: node 0's launcher and
// the other nodes' in this process, meeting over loopback through the
// launchers' real store, each node beating; node 0's first plan is what
// is checked, and what each other node makes of it. Every test takes
// well under 2 s, under -race too (the heartbeat is 150 ms, so a launcher
// counts as dead 600 ms after the window's close).

// callNode is one node's launcher in a last-call test.
type callNode struct {
	r      *nodeRdzv
	stderr *lockedBuffer
	scfg   rendezvous.StoreConfig
}

// newCallNode is the launcher of node of a job of -nnodes lo:hi, two
// ranks a node, with a last call of window, meeting at master.
func newCallNode(node, lo, hi int, window time.Duration, master string) *callNode {
	cfg := Config{Ranks: 2, Nnodes: lo, MaxNodes: hi, NodeRank: node, Master: master,
		Getenv: func(k string) string { return map[string]string{EnvSecret: joinTestSecret}[k] }}
	cfg.joinReport, cfg.rejectedGrace = time.Second, time.Second
	cfg.heartbeat, cfg.heartbeatLost = 150*time.Millisecond, 2*time.Second
	e := &Elastic{JoinTimeout: 10 * time.Second, RejoinTimeout: time.Second, LastCall: window, Continue: true, Heal: true}
	stderr := &lockedBuffer{}
	host, port, _ := splitMaster(master)
	r := &nodeRdzv{cfg: cfg, e: e, w: newOutputs(Config{Stdout: io.Discard, Stderr: stderr}), node: node, host: host, port: port,
		seal: newSealer(joinTestSecret)}
	return &callNode{r: r, stderr: stderr, scfg: rendezvous.StoreConfig{Secret: []byte(joinTestSecret), Timeout: e.JoinTimeout}}
}

// callJob is node 0 of a last-call test, hosting the rendezvous, and the
// job's -nnodes and last call.
type callJob struct {
	n0     *callNode
	master string
	lo, hi int
	window time.Duration
	plan   chan nodePlan
	err    chan error
	took   chan time.Duration
	// joinTimeout is the other nodes' Elastic.JoinTimeout: how long one
	// asking to join the running job waits for node 0's answer.
	joinTimeout time.Duration
}

// startCall hosts node 0's rendezvous and runs its join (with the last
// call), publishing the plan it returns as node 0's lead would.
func startCall(t *testing.T, lo, hi int, window time.Duration) *callJob {
	t.Helper()
	var j *callJob
	for try := 0; ; try++ { // another test may take the port between pick and listen
		master := loopbackMaster(t)
		j = &callJob{n0: newCallNode(0, lo, hi, window, master), master: master, lo: lo, hi: hi, window: window,
			plan: make(chan nodePlan, 1), err: make(chan error, 1), took: make(chan time.Duration, 1), joinTimeout: time.Second}
		err := j.n0.r.host0(context.Background(), j.n0.scfg)
		if err == nil {
			break
		}
		if try == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { j.n0.r.store.Close() })
	go func() {
		began := time.Now()
		plan, err := j.n0.r.join(context.Background(), nil)
		j.took <- time.Since(began)
		if err == nil {
			plan.StorePort = 40000
			err = j.n0.r.publish(context.Background(), plan)
		}
		j.plan <- plan
		j.err <- err
	}()
	return j
}

// result waits for node 0's plan (or error) and how long its join took.
func (j *callJob) result(t *testing.T) (nodePlan, error, time.Duration) {
	t.Helper()
	select {
	case took := <-j.took:
		plan, err := <-j.plan, <-j.err
		t.Logf("node 0 (join took %v):\n%s", took.Round(time.Millisecond), j.n0.stderr)
		return plan, err, took
	case <-time.After(15 * time.Second):
		t.Fatalf("node 0's join did not end within 15 s:\n%s", j.n0.stderr)
	}
	panic("unreachable")
}

// follower is another node's launcher joining j: it dials node 0,
// beats until stopBeat, and comes in (enter, or as a start node) with
// the report rep.
type follower struct {
	*callNode
	stopBeat func()
	plan     chan nodePlan
	err      chan error
}

// join starts node's launcher, with -nnodes lo:hi (those of j when 0).
func (j *callJob) join(t *testing.T, node, lo, hi int) *follower {
	t.Helper()
	if lo == 0 {
		lo, hi = j.lo, j.hi
	}
	n := newCallNode(node, lo, hi, j.window, j.master)
	n.r.e.JoinTimeout, n.scfg.Timeout = j.joinTimeout, j.joinTimeout
	if err := n.r.dialLeader(context.Background(), n.scfg); err != nil {
		t.Fatalf("node %d: %v", node, err)
	}
	t.Cleanup(func() { n.r.store.Close() })
	hctx, cancel := context.WithCancel(context.Background())
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		n.r.heartbeat(hctx, func(error) {})
	}()
	f := &follower{callNode: n, plan: make(chan nodePlan, 1), err: make(chan error, 1)}
	f.stopBeat = func() { cancel(); <-beating }
	t.Cleanup(f.stopBeat)
	cfg := n.r.cfg
	rep := nodeReport{Node: node, Ranks: cfg.Ranks, Attempt: -1, Nnodes: cfg.Nnodes, MaxNodes: cfg.MaxNodes, Master: cfg.Master, MasterLoopback: true}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var plan nodePlan
		var err error
		if n.r.rj.rejoin {
			plan, err = n.r.enter(ctx, nil, rep)
		} else {
			plan, err = n.r.rendezvous(ctx, 0, rep)
		}
		f.plan <- plan
		f.err <- err
	}()
	return f
}

// result waits for what f made of node 0's first plan.
func (f *follower) result(t *testing.T) (nodePlan, error) {
	t.Helper()
	select {
	case plan := <-f.plan:
		return plan, <-f.err
	case <-time.After(15 * time.Second):
		t.Fatalf("node %d did not come in within 15 s:\n%s", f.r.node, f.stderr)
	}
	panic("unreachable")
}

// in checks that f runs node 0's first attempt as a member of members.
func (f *follower) in(t *testing.T, members []int) {
	t.Helper()
	plan, err := f.result(t)
	if err != nil || !slices.Equal(plan.Members, members) || f.r.rj.grow || f.r.rj.rejoin {
		t.Errorf("node %d: plan %+v, %v (joining the running job: %v), want a member of %v\n%s", f.r.node, plan, err, f.r.rj.grow, members, f.stderr)
	}
}

// Window nodes that come while node 0 waits are in the first attempt,
// numbered by -node-rank, and once all MAX are in the window closes at
// once: nowhere near its 10 s.
func TestLastCallAllIn(t *testing.T) {
	t.Parallel()
	j := startCall(t, 1, 3, 10*time.Second)
	n2 := j.join(t, 2, 0, 0) // before node 1: still node 2
	time.Sleep(100 * time.Millisecond)
	n1 := j.join(t, 1, 0, 0)
	plan, err, took := j.result(t)
	if err != nil || !slices.Equal(plan.Members, []int{0, 1, 2}) || len(plan.Dropped) != 0 {
		t.Fatalf("plan %+v, %v; want nodes 0, 1, 2", plan, err)
	}
	if took > 3*time.Second {
		t.Errorf("the job started %v after node 0 began waiting: the window did not close once all were in", took)
	}
	n1.in(t, []int{0, 1, 2})
	n2.in(t, []int{0, 1, 2})
	for _, want := range []string{"last call for nodes 1, 2: the job starts in 10s", "node 2 joined in the last call", "(all are in): the job starts on 3 nodes"} {
		if !strings.Contains(j.n0.stderr.String(), want) {
			t.Errorf("node 0 did not say %q", want)
		}
	}
}

// A window that runs out starts the job on the nodes in; one that never
// came is named, and a launcher of it started later asks to join the
// running job (scale up).
func TestLastCallRunsOut(t *testing.T) {
	t.Parallel()
	window := 500 * time.Millisecond
	j := startCall(t, 2, 4, window)
	n1 := j.join(t, 1, 0, 0) // a start node
	n3 := j.join(t, 3, 0, 0)
	plan, err, took := j.result(t)
	if err != nil || !slices.Equal(plan.Members, []int{0, 1, 3}) {
		t.Fatalf("plan %+v, %v; want nodes 0, 1, 3", plan, err)
	}
	if took < window {
		t.Errorf("the job started %v after node 0 began waiting, before the window of %v closed", took, window)
	}
	n1.in(t, []int{0, 1, 3})
	n3.in(t, []int{0, 1, 3})
	if want := "node 2 did not join in time; a launcher started for one later joins the running job"; !strings.Contains(j.n0.stderr.String(), want) {
		t.Errorf("node 0 did not say %q", want)
	}
	j.joinTimeout = 500 * time.Millisecond
	late := j.join(t, 2, 0, 0)
	if _, err := late.result(t); err == nil || !strings.Contains(err.Error(), "joining the running job: node 0 did not answer within 500ms") ||
		!strings.Contains(late.stderr.String(), "asking node 0 to take node 2 into the running job") {
		t.Errorf("node 2, started after the window: %v, want it to ask to join the running job (no attempt runs here: no answer)\n%s", err, late.stderr)
	}
}

// A window node whose launcher dies during the window (its heartbeat
// stops) is left out at the close instead of hanging the start.
func TestLastCallWindowNodeDies(t *testing.T) {
	t.Parallel()
	j := startCall(t, 1, 4, 600*time.Millisecond) // node 3 never comes: the window runs out
	n1 := j.join(t, 1, 0, 0)
	n2 := j.join(t, 2, 0, 0)
	time.Sleep(100 * time.Millisecond)
	n2.stopBeat()
	plan, err, took := j.result(t)
	if err != nil || !slices.Equal(plan.Members, []int{0, 1}) {
		t.Fatalf("plan %+v, %v; want nodes 0, 1", plan, err)
	}
	n1.in(t, []int{0, 1})
	if want := "node 2 joined in the last call, but its launcher stopped answering (no heartbeat within 600ms of its close): the job starts without it"; !strings.Contains(j.n0.stderr.String(), want) {
		t.Errorf("node 0 did not say %q", want)
	}
	if took > 2*time.Second {
		t.Errorf("the start took %v", took)
	}
}

// A start node whose launcher dies during the window ends the job at the
// close, naming it: the job cannot start without it.
func TestLastCallStartNodeDies(t *testing.T) {
	t.Parallel()
	k := startCall(t, 2, 3, 300*time.Millisecond)
	s1 := k.join(t, 1, 0, 0)
	time.Sleep(100 * time.Millisecond)
	s1.stopBeat()
	_, err, _ := k.result(t)
	want := "node 1 joined, but its launcher stopped answering during the last call (no heartbeat within 600ms of its close): the job cannot start without nodes 0..1"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a start node lost in the window: %v, want %q", err, want)
	}
}

// Window nodes node 0 leaves out, each told why at once: another
// -nnodes, and one too many for the global batch (Elastic.Fits).
func TestLastCallLeavesOut(t *testing.T) {
	t.Parallel()
	j := startCall(t, 1, 4, 10*time.Second)
	j.n0.r.e.Fits = func(n int) error {
		if n > 4 {
			return fmt.Errorf("the global batch 4 is smaller than the %d ranks left", n)
		}
		return nil
	}
	n1 := j.join(t, 1, 0, 0)
	time.Sleep(100 * time.Millisecond) // node 1 in first: node 3 is the one too many
	n2 := j.join(t, 2, 2, 4)
	n3 := j.join(t, 3, 0, 0)
	plan, err, _ := j.result(t)
	if err != nil || !slices.Equal(plan.Members, []int{0, 1}) || len(plan.Dropped) != 2 {
		t.Fatalf("plan %+v, %v; want nodes 0, 1, and 2 and 3 dropped", plan, err)
	}
	n1.in(t, []int{0, 1})
	for f, want := range map[*follower]string{
		n2: "node 2: node 0 left node 2 out of the job: every node must be given the same -nnodes as node 0's 1:4: node 2 has -nnodes 2:4",
		n3: "node 3: node 0 left node 3 out of the job: the job cannot start on 6 ranks: the global batch 4 is smaller than the 6 ranks left",
	} {
		if _, err := f.result(t); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node %d: %v, want %q", f.r.node, err, want)
		}
	}
}

// Without a last call (0), node 0 starts as soon as the start's nodes
// are in: a window node's report is not waited for.
func TestLastCallNone(t *testing.T) {
	t.Parallel()
	j := startCall(t, 1, 2, 0)
	j.join(t, 1, 0, 0)
	plan, err, took := j.result(t)
	if err != nil || !slices.Equal(plan.Members, []int{0}) || took > time.Second {
		t.Fatalf("plan %+v, %v after %v; want node 0 alone at once", plan, err, took)
	}
	if strings.Contains(j.n0.stderr.String(), "last call") {
		t.Errorf("node 0 spoke of a last call:\n%s", j.n0.stderr)
	}
}

// The window's record: who is in, who is left out, who is missing, and
// when it is settled (the window closes at once).
func TestCallState(t *testing.T) {
	c := &callState{want: []int{2, 3, 4}}
	c.take(3, "")
	c.take(4, "another -ranks")
	if c.settled() || !slices.Equal(c.missing(), []int{2}) {
		t.Fatalf("%+v: settled %v, missing %v; want node 2 missing", c, c.settled(), c.missing())
	}
	c.take(2, "")
	if !c.settled() || len(c.missing()) != 0 {
		t.Fatalf("%+v: not settled", c)
	}
	c.drop([]int{3, 7})
	if !slices.Equal(c.in, []int{2}) {
		t.Fatalf("in after node 3 dropped: %v", c.in)
	}
	for _, k := range []struct {
		lo, hi int
		window time.Duration
		want   []int
	}{
		{1, 3, time.Second, []int{1, 2}},
		{2, 2, time.Second, nil},
		{1, 3, 0, nil},
	} {
		r := &nodeRdzv{cfg: Config{Nnodes: k.lo, MaxNodes: k.hi}, e: &Elastic{LastCall: k.window}}
		if got := r.windowNodes(); !slices.Equal(got, k.want) {
			t.Errorf("-nnodes %d:%d, last call %v: window nodes %v, want %v", k.lo, k.hi, k.window, got, k.want)
		}
	}
	if err := (&Elastic{LastCall: -time.Second}).checkScaleUp(Config{Nnodes: 1, MaxNodes: 2}); err == nil || !strings.Contains(err.Error(), "last call -1s: must not be negative") {
		t.Errorf("a negative last call: %v", err)
	}
}
