package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// nodeJob is one node launcher of a test's multi-node elastic job of
// helper ranks, run in this process.
type nodeJob struct {
	cfg      Config
	attempts []Attempt
	restarts []Restart
	stderr   *lockedBuffer
	err      error
}

// nodeJobs makes nnodes launchers of perNode elastic helper ranks each,
// meeting at a fresh loopback master, with the faults fails (global
// ranks), whose Prepare "resumes" from step 1 on as many ranks as allowed
// (node 0) or as node 0 chose (the others).
func nodeJobs(t *testing.T, nnodes, perNode, maxRestarts, minRanks int, fails string, extra ...string) []*nodeJob {
	master := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	jobs := make([]*nodeJob, nnodes)
	for node := range jobs {
		cfg, _, stderr := helperConfig(perNode, "elastic", append([]string{"RINGDDP_HELPER_FAILS=" + fails}, extra...)...)
		cfg.Grace = time.Second
		cfg.Nnodes, cfg.NodeRank, cfg.Master = nnodes, node, master
		cfg.Getenv = func(k string) string { return map[string]string{EnvSecret: "nodes test secret", EnvRunID: "nodes"}[k] }
		nj := &nodeJob{cfg: cfg, stderr: stderr}
		var mu sync.Mutex
		cfg.Elastic = &Elastic{
			MaxRestarts: maxRestarts, MinRanks: minRanks, Backoff: 50 * time.Millisecond, RejoinTimeout: 2 * time.Second,
			Prepare: func(_ context.Context, a Attempt) (Resume, error) {
				mu.Lock()
				nj.attempts = append(nj.attempts, a)
				mu.Unlock()
				if a.Leader != nil {
					r := *a.Leader
					r.Args = cfg.Args
					return r, nil
				}
				return Resume{Ranks: a.MaxRanks, Args: cfg.Args, Step: 1, From: "ck", Found: true}, nil
			},
			OnRestart: func(_ io.Writer, r Restart) {
				mu.Lock()
				nj.restarts = append(nj.restarts, r)
				mu.Unlock()
			},
		}
		nj.cfg = cfg
		jobs[node] = nj
	}
	return jobs
}

// run runs every node's launcher, each with its own context from ctxOf.
func runNodeJobs(jobs []*nodeJob, ctxOf func(node int) context.Context) {
	var wg sync.WaitGroup
	for node, nj := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nj.err = Run(ctxOf(node), nj.cfg)
		}()
	}
	wg.Wait()
}

func (nj *nodeJob) String() string {
	return fmt.Sprintf("node %d: %v\nstderr:\n%s", nj.cfg.NodeRank, nj.err, nj.stderr)
}

// A rank killed on node 1 of 2 (1 rank each): node 1's launcher tells
// node 0's, both restart on 2 ranks with node 0's choice, and finish.
func TestElasticNodesRankKilled(t *testing.T) {
	t.Parallel()
	jobs := nodeJobs(t, 2, 1, 2, 0, "0/1/3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runNodeJobs(jobs, func(int) context.Context { return ctx })
	for _, nj := range jobs {
		if nj.err != nil {
			t.Fatal(nj)
		}
	}
	n0, n1 := jobs[0], jobs[1]
	t.Logf("%v\n%v", n0, n1)
	if len(n0.restarts) != 1 || len(n0.attempts) != 1 || len(n1.attempts) != 1 {
		t.Fatalf("node 0: %d restarts, %d prepared; node 1: %d prepared; want 1 each\n%v\n%v", len(n0.restarts), len(n0.attempts), len(n1.attempts), n0, n1)
	}
	r := n0.restarts[0]
	f := r.Failure
	if f.Node != 1 || f.Exit.Rank != 1 || f.Exit.Reason() != "was killed by signal killed" || f.AtStartup || f.Nodes != 2 || f.Ranks != 2 {
		t.Errorf("failure %+v (%v), want rank 1 on node 1 killed in training", f, f)
	}
	if r.Resume.Ranks != 2 || r.Nodes != 2 || len(r.Dropped) != 0 || r.TrainingAgain <= 0 {
		t.Errorf("restart %+v, want 2 ranks on 2 nodes, training again", r)
	}
	if a := n1.attempts[0]; a.Leader == nil || a.Leader.Ranks != 2 || a.Leader.From != "ck" || a.NodeRank != 1 || a.RanksPerNode != 1 {
		t.Errorf("node 1 prepared %+v, want node 0's choice as node 1", a)
	}
	if !strings.Contains(n0.stderr.String(), "launch: node 0: restart 1 of at most 2 after rank 1 (pid") {
		t.Errorf("node 0's stderr does not report the restart:\n%s", n0.stderr)
	}
	if !strings.Contains(n1.stderr.String(), "launch: node 1: restart 1 (node 0's plan) from step 1 on 2 ranks, 2 nodes") {
		t.Errorf("node 1's stderr does not report the restart:\n%s", n1.stderr)
	}
}

// Node 1's launcher goes away mid-run (its context is cancelled: it stops
// its ranks and never reports back): node 0 drops it after the rejoin
// timeout and finishes alone when -min-ranks allows, and fails naming
// what happened when it does not.
func TestElasticNodeLost(t *testing.T) {
	t.Parallel()
	for _, minRanks := range []int{1, 0} {
		t.Run("min_ranks="+strconv.Itoa(minRanks), func(t *testing.T) {
			t.Parallel()
			jobs := nodeJobs(t, 2, 1, 2, minRanks, "", "RINGDDP_HELPER_STEP_SLEEP=400ms")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ctx1, cancel1 := context.WithCancel(ctx)
			// Cancel node 1's launcher once its rank has trained a step
			// (an event, not a time: under load the ranks' start can take
			// longer than any fixed wait); the 4 steps of 400 ms left
			// keep it from finishing first.
			go func() {
				for !strings.Contains(jobs[1].cfg.Stdout.(*lockedBuffer).String(), "helper rank 1: step 1 done") && ctx1.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
				cancel1()
			}()
			runNodeJobs(jobs, func(node int) context.Context {
				if node == 1 {
					return ctx1
				}
				return ctx
			})
			n0, n1 := jobs[0], jobs[1]
			if n1.err == nil {
				t.Errorf("node 1's launcher, cancelled, ended without an error:\n%v", n1)
			}
			if minRanks == 0 {
				if n0.err == nil || !strings.Contains(n0.err.Error(), "node 1 dropped (its launcher did not come back within 2s)") ||
					!strings.Contains(n0.err.Error(), "fewer than the minimum of 2 (-min-ranks)") {
					t.Fatalf("want node 0 to fail naming the lost node and the minimum:\n%v", n0)
				}
				return
			}
			if n0.err != nil || len(n0.restarts) != 1 {
				t.Fatalf("want node 0 to finish alone after 1 restart:\n%v\n%v", n0, n1)
			}
			r := n0.restarts[0]
			if r.Resume.Ranks != 1 || r.Nodes != 1 || len(r.Dropped) != 1 || r.Dropped[0].Node != 1 || r.TrainingAgain <= 0 {
				t.Errorf("restart %+v, want 1 rank on node 0 alone, node 1 dropped", r)
			}
			if f := r.Failure; f.Node != 1 || f.Exit.Rank != 1 || !strings.Contains(f.Exit.Reason(), "node 1 (") || !strings.Contains(f.Exit.Reason(), "was lost with its rank 1: its launcher did not come back") {
				t.Errorf("failure %v, want rank 1 lost with node 1", f)
			}
		})
	}
}

// A node whose rank fails at start-up is dropped from the restart when
// -min-ranks allows (2 nodes of 2 ranks, minimum 2).
func TestElasticNodeFailsAtStartup(t *testing.T) {
	t.Parallel()
	jobs := nodeJobs(t, 2, 2, 2, 2, "0/3/3;1/3/-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runNodeJobs(jobs, func(int) context.Context { return ctx })
	n0, n1 := jobs[0], jobs[1]
	if n0.err != nil || len(n0.restarts) != 2 {
		t.Fatalf("want node 0 to finish after 2 restarts:\n%v\n%v", n0, n1)
	}
	var de interface{ Error() string } = n1.err
	if de == nil || !strings.Contains(n1.err.Error(), "node 1 was dropped from the job at restart 2: its rank failed at start-up") {
		t.Errorf("node 1's error, want it dropped:\n%v", n1)
	}
	r := n0.restarts[1]
	if !r.Failure.AtStartup || r.Failure.Node != 1 || r.Resume.Ranks != 2 || r.Nodes != 1 {
		t.Errorf("second restart %+v, want node 1's start-up failure and 2 ranks on node 0", r)
	}
	if errors.Is(n0.err, context.Canceled) {
		t.Error(n0.err)
	}
}
