package launch

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestRestartPolicy drives the restart decision through every branch:
// each case runs a few attempt ends through Step, answering every Ask
// with prepare, and checks the last step and, after a restart, Resume.
func TestRestartPolicy(t *testing.T) {
	for _, c := range restartCases() {
		t.Run(c.name, func(t *testing.T) { checkRestartCase(t, c) })
	}
}

// restartWant is what one case of TestRestartPolicy expects.
type restartWant struct {
	backoff  int
	done     bool
	err      string // a part of the error, "" none
	maxRanks int    // the Ask's, when not done
	// after Resume with prepare's answer:
	resumeErr string
	members   []int
	dropped   []string // the dropped nodes' reasons
	lost      int64
}

// restartCase is one case of TestRestartPolicy: the job, the ends of its
// attempts and Prepare's answer, and what the policy must decide.
type restartCase struct {
	name           string
	e              Elastic
	ranks, perNode int
	ends           []attemptEnd // all but the last answered with prepare
	prepare        Resume
	prepareErr     error
	want           restartWant
}

// restartCases are TestRestartPolicy's cases.
func restartCases() []restartCase {
	exit := &ExitError{Rank: 1, Pid: 42, Err: errors.New("exit status 3")}
	inTraining := Failure{Ranks: 4, Exit: exit, StartStep: 0, Step: 7}
	atStartup := Failure{Ranks: 4, Exit: exit, StartStep: -1, Step: -1, AtStartup: true}
	onNode := func(f Failure, node int) Failure { f.Node, f.Nodes = node, 3; return f }
	lost := DroppedNode{Node: 2, Reason: "its launcher did not come back within 30s"}
	return []restartCase{
		{name: "clean exit", e: Elastic{MaxRestarts: 2, MinRanks: 4}, ranks: 4,
			ends: []attemptEnd{{Clean: true}}, want: restartWant{done: true}},
		{name: "stopped: the attempt's own error stands", e: Elastic{MaxRestarts: 2, MinRanks: 4}, ranks: 4,
			ends: []attemptEnd{{Err: errors.New("stopped by interrupt"), Stopped: "nothing to restart"}},
			want: restartWant{done: true, err: "stopped by interrupt"}},
		{name: "stopped by a node's signal, not clean", e: Elastic{MaxRestarts: 2, MinRanks: 4}, ranks: 4, perNode: 2,
			ends: []attemptEnd{{Stopped: "node 1's launcher was stopped by terminated", Members: []int{0, 1}}},
			want: restartWant{done: true, err: "node 1's launcher was stopped by terminated, and the job did not end cleanly: not restarting it"}},
		{name: "stopped by a node's signal, clean", e: Elastic{MaxRestarts: 2, MinRanks: 4}, ranks: 4, perNode: 2,
			ends: []attemptEnd{{Clean: true, Stopped: "node 1's launcher was stopped by terminated", Members: []int{0, 1}}},
			want: restartWant{done: true}},
		{name: "rank failure in training, restarts left", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: inTraining}}, prepare: Resume{Ranks: 4, Step: 5, From: "ckpt-5"},
			want: restartWant{maxRanks: 4, lost: 2}},
		{name: "Prepare fails", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: inTraining}}, prepareErr: errors.New("no checkpoint"),
			want: restartWant{maxRanks: 4, resumeErr: "launch: restarting after rank 1 (pid 42) exit status 3 at step 7: no checkpoint"}},
		{name: "Prepare asks for too many ranks", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: inTraining}}, prepare: Resume{Ranks: 5},
			want: restartWant{maxRanks: 4, resumeErr: "5 ranks asked for, want 2..4"}},
		{name: "restarts exhausted", e: Elastic{MaxRestarts: 1, MinRanks: 4}, ranks: 4,
			ends: []attemptEnd{{Failure: inTraining}, {Failure: inTraining}}, prepare: Resume{Ranks: 4},
			want: restartWant{done: true, err: "the job failed 2 times and no restart is left (max restarts 1)"}},
		{name: "start-up failure: one rank fewer, backoff", e: Elastic{MaxRestarts: 3, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: atStartup}}, prepare: Resume{Ranks: 3},
			want: restartWant{backoff: 1, maxRanks: 3, lost: 0}},
		{name: "start-up failures in a row double the backoff", e: Elastic{MaxRestarts: 3, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: atStartup}, {Failure: atStartup}}, prepare: Resume{Ranks: 2},
			want: restartWant{backoff: 2, maxRanks: 2}}, // 4, 3, then MinRanks
		{name: "a failure in training resets the start-up count", e: Elastic{MaxRestarts: 3, MinRanks: 2}, ranks: 4,
			ends: []attemptEnd{{Failure: atStartup}, {Failure: inTraining}}, prepare: Resume{Ranks: 3},
			want: restartWant{backoff: 0, maxRanks: 3, lost: 7}},
		{name: "start-up failure at min ranks keeps the world", e: Elastic{MaxRestarts: 3, MinRanks: 4}, ranks: 4,
			ends: []attemptEnd{{Failure: atStartup}}, prepare: Resume{Ranks: 4},
			want: restartWant{backoff: 1, maxRanks: 4}},
		{name: "nodes: failure in training, every node back", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(inTraining, 1), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 6, Step: 7},
			want:    restartWant{maxRanks: 6, members: []int{0, 1, 2}}},
		{name: "nodes: a node lost", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(inTraining, 2), Members: []int{0, 1}, Dropped: []DroppedNode{lost}}},
			prepare: Resume{Ranks: 4},
			want:    restartWant{maxRanks: 4, members: []int{0, 1}, dropped: []string{lost.Reason}, lost: 7}},
		{name: "nodes: start-up failure drops its node", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(atStartup, 1), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 4},
			want:    restartWant{backoff: 1, maxRanks: 4, members: []int{0, 2}, dropped: []string{"its rank failed at start-up"}}},
		{name: "nodes: start-up failure on node 0 drops nothing", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(atStartup, 0), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 6},
			want:    restartWant{backoff: 1, maxRanks: 6, members: []int{0, 1, 2}}},
		{name: "nodes: start-up failure at min ranks drops nothing", e: Elastic{MaxRestarts: 2, MinRanks: 6}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(atStartup, 1), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 6},
			want:    restartWant{backoff: 1, maxRanks: 6, members: []int{0, 1, 2}}},
		{name: "nodes: fewer than min ranks left", e: Elastic{MaxRestarts: 2, MinRanks: 6}, ranks: 6, perNode: 2,
			ends: []attemptEnd{{Failure: onNode(inTraining, 2), Members: []int{0, 1}, Dropped: []DroppedNode{lost}}},
			want: restartWant{done: true, err: "node 2 dropped (its launcher did not come back within 30s); the nodes left (0, 1) run 4 ranks, fewer than the minimum of 6 (-min-ranks)"}},
		{name: "nodes: the global batch kept on fewer nodes", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(inTraining, 1), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 2},
			want:    restartWant{maxRanks: 6, members: []int{0}, dropped: []string{"the global batch is kept on fewer nodes", "the global batch is kept on fewer nodes"}, lost: 7}},
		{name: "nodes: Prepare's world not whole nodes", e: Elastic{MaxRestarts: 2, MinRanks: 2}, ranks: 6, perNode: 2,
			ends:    []attemptEnd{{Failure: onNode(inTraining, 1), Members: []int{0, 1, 2}}},
			prepare: Resume{Ranks: 5},
			want:    restartWant{maxRanks: 6, resumeErr: "5 ranks asked for, want a multiple of 2 in 2..6"}},
	}
}

// checkRestartCase drives a restart policy through c's attempts and checks
// its last decision and the restart it resumes.
func checkRestartCase(t *testing.T, c restartCase) {
	p := newRestartPolicy(&c.e, c.ranks, c.perNode)
	var step restartStep
	for i, end := range c.ends {
		step = p.Step(end)
		if i == len(c.ends)-1 {
			break
		}
		if step.Done {
			t.Fatalf("attempt %d: done (%v), want a restart", i, step.Err)
		}
		if _, _, err := p.Resume(c.prepare, nil); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	w := c.want
	if step.Done != w.done || step.Backoff != w.backoff {
		t.Fatalf("done %v backoff %d (err %v), want done %v backoff %d", step.Done, step.Backoff, step.Err, w.done, w.backoff)
	}
	if w.err == "" && step.Err != nil || w.err != "" && (step.Err == nil || !strings.Contains(step.Err.Error(), w.err)) {
		t.Fatalf("err %v, want one with %q", step.Err, w.err)
	}
	if step.Done {
		return
	}
	last := c.ends[len(c.ends)-1].Failure
	if step.Ask.MaxRanks != w.maxRanks || step.Ask.MinRanks != c.e.MinRanks || step.Ask.Restart != len(c.ends) ||
		step.Ask.RanksPerNode != c.perNode || step.Ask.Failure != last {
		t.Fatalf("ask %+v, want max ranks %d, min %d, restart %d, ranks per node %d, failure %v",
			step.Ask, w.maxRanks, c.e.MinRanks, len(c.ends), c.perNode, last)
	}
	r, members, err := p.Resume(c.prepare, c.prepareErr)
	if w.resumeErr != "" {
		if err == nil || !strings.Contains(err.Error(), w.resumeErr) {
			t.Fatalf("resume: %v, want an error with %q", err, w.resumeErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, d := range r.Dropped {
		reasons = append(reasons, d.Reason)
	}
	if r.Number != len(c.ends) || r.Failure != last || r.StepsLost != w.lost || !slices.Equal(members, w.members) ||
		!slices.Equal(reasons, w.dropped) || (c.perNode > 0 && r.Nodes != len(w.members)) {
		t.Fatalf("restart %+v members %v, want number %d, steps lost %d, members %v, dropped %q",
			r, members, len(c.ends), w.lost, w.members, w.dropped)
	}
}
