package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The launcher helper: with RINGDDP_HELPER_LAUNCHER=NODE/NNODES/RANKS/MASTER
// the test binary is one node's launcher (in its own process, so that a
// test can kill it), its ranks in RINGDDP_LAUNCH_HELPER's mode (passed on
// through Config.Env), the secret from RINGDDP_HELPER_SECRET.
const launcherVar = "RINGDDP_HELPER_LAUNCHER"

// launcherMain runs the launcher launcherVar describes.
func launcherMain(spec string) int {
	p := strings.Split(spec, "/")
	if len(p) != 4 {
		fmt.Fprintf(os.Stderr, "%s=%q: want NODE/NNODES/RANKS/MASTER\n", launcherVar, spec)
		return 2
	}
	node, _ := strconv.Atoi(p[0])
	nnodes, _ := strconv.Atoi(p[1])
	ranks, _ := strconv.Atoi(p[2])
	mode := os.Getenv(helperVar)
	cfg := Config{Ranks: ranks, Nnodes: nnodes, NodeRank: node, Master: p[3], Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{helperVar + "=" + mode, launcherVar + "="}, NoSignals: true, Grace: time.Second,
		Getenv: func(k string) string { return map[string]string{EnvSecret: os.Getenv("RINGDDP_HELPER_SECRET")}[k] }}
	if err := Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// killedHost is a test of a 2 × 2 job on loopback whose one node (the
// host) is a launcher process of its own, killed mid-run with its ranks,
// while the other node's launcher runs in this process.
type killedHost struct {
	master string
	cmd    *exec.Cmd
	out    *lockedBuffer // the killed node's output
	errc   chan error    // the surviving launcher's Run
	stderr *lockedBuffer // the surviving launcher's stderr
}

// startKilledHost starts node killed's launcher as a process and the other
// node's in this process (heartbeat limit 2 s), and waits until the
// killed node's 2 ranks all-reduce.
func startKilledHost(t *testing.T, killed int) (*killedHost, []int) {
	master := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	const secret = "killed host test secret, both nodes"
	h := &killedHost{master: master, out: &lockedBuffer{}, errc: make(chan error, 1)}
	pids := make(chan int, 2)
	h.out.onLine = func(s string) {
		if m := regexp.MustCompile(`^\[rank \d+\] pid (\d+) ready$`).FindStringSubmatch(s); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids <- pid
		}
	}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(filterEnv(os.Environ(), launchVars), launcherVar+"="+strconv.Itoa(killed)+"/2/2/"+master,
		helperVar+"=looppid", "RINGDDP_HELPER_SECRET="+secret)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL); <-done })

	cfg, _, stderr := helperConfig(2, "looppid")
	cfg.Nnodes, cfg.NodeRank, cfg.Master = 2, 1-killed, master
	cfg.Grace = time.Second
	cfg.heartbeatLost = 2 * time.Second // the killed node beats every 500 ms; the rejoin timeout stays 30 s
	cfg.Getenv = func(k string) string { return map[string]string{EnvSecret: secret}[k] }
	h.stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() { h.errc <- Run(ctx, cfg) }()
	var rankPids []int
	for len(rankPids) < 2 {
		select {
		case p := <-pids:
			rankPids = append(rankPids, p)
		case err := <-h.errc:
			t.Fatalf("the surviving node ended before the other's ranks ran: %v\nit:\n%s\nthe other:\n%s", err, stderr, h.out)
		case <-ctx.Done():
			t.Fatalf("the killed node's ranks never ran\nthe survivor:\n%s\nthe other:\n%s", stderr, h.out)
		}
	}
	return h, rankPids
}

// kill kills the host, its launcher and its ranks at once, and returns
// the surviving launcher's error and how long after the kill it came.
func (h *killedHost) kill(t *testing.T, rankPids []int) (error, time.Duration) {
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	for _, p := range rankPids {
		_ = syscall.Kill(-p, syscall.SIGKILL)
	}
	killed := time.Now()
	err := <-h.errc
	took := time.Since(killed)
	t.Logf("the surviving node ended %v after the kill: %v\nits stderr:\n%s", took, err, h.stderr)
	if err == nil {
		t.Fatal("the surviving node succeeded")
	}
	if took > 10*time.Second {
		t.Errorf("the surviving node took %v after the kill to end", took)
	}
	return err, took
}

// A host killed mid-run: node 1's launcher and its ranks are killed
// (SIGKILL) while the 2 × 2 ranks all-reduce. Node 0's launcher's last
// line names the lost host (node 1, its address) and its ranks (2, 3) as
// the root cause, not one of its own ranks that failed for it, within
// the heartbeat limit rather than the 30 s rejoin timeout.
func TestLaunchHostKilled(t *testing.T) {
	t.Parallel()
	h, pids := startKilledHost(t, 1)
	err, _ := h.kill(t, pids)
	// The error is the command's last line.
	for _, want := range []string{"node 1 (", "127.0.0.1)) was lost with its ranks 2, 3", "no heartbeat for 2s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("node 0's error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "at start-up") {
		t.Errorf("node 0's error %q says start-up of ranks that never reported their start", err)
	}
	for _, bad := range []string{"rank 0 (pid", "rank 1 (pid"} {
		if strings.Contains(err.Error(), bad) && strings.Index(err.Error(), bad) < strings.Index(err.Error(), "node 1") {
			t.Errorf("node 0's error blames a surviving rank first: %v", err)
		}
	}
}

// Node 0's host killed mid-run (its launcher, a process of its own, and
// its ranks): node 1's launcher ends within seconds naming node 0, its
// address and its ranks, instead of waiting out the rendezvous' timeouts.
func TestLaunchNode0Killed(t *testing.T) {
	t.Parallel()
	h, pids := startKilledHost(t, 0)
	err, _ := h.kill(t, pids)
	for _, want := range []string{"launch: node 1: node 0 (" + h.master + ") was lost with its ranks 0, 1", "no heartbeat taken for 2s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("node 1's error %q does not say %q", err, want)
		}
	}
}

// A job of several nodes gets a run id of its own: node 0's launcher
// makes one ("nodes-" and 16 hex digits) and every rank of every node
// gets it; a second job gets another. RINGDDP_RUN_ID set on node 0 wins,
// and a node that set another says which one runs.
func TestNodesRunID(t *testing.T) {
	t.Parallel()
	// runJob runs 2 launchers × 2 ranks with RINGDDP_RUN_ID ids[node] and
	// returns every rank's run id, and node 1's stderr.
	runJob := func(ids [2]string) ([]string, string) {
		master := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		outs, errs := make([]*lockedBuffer, 2), make([]*lockedBuffer, 2)
		for node := range 2 {
			cfg, stdout, stderr := helperConfig(2, "runid")
			cfg.PrefixRank0 = true
			cfg.Nnodes, cfg.NodeRank, cfg.Master = 2, node, master
			cfg.Getenv = func(k string) string {
				return map[string]string{EnvSecret: "run id test secret of both nodes", EnvRunID: ids[node]}[k]
			}
			outs[node], errs[node] = stdout, stderr
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := Run(ctx, cfg); err != nil {
					t.Errorf("node %d: %v\n%s", node, err, stderr)
				}
			}()
		}
		wg.Wait()
		var got []string
		for node := range 2 {
			for _, l := range lines(outs[node].String()) {
				if _, id, ok := strings.Cut(l, "] run id "); ok {
					got = append(got, id)
				}
			}
		}
		if len(got) != 4 {
			t.Fatalf("run ids %q, want 4 (one per rank)\nnode 0:\n%s\nnode 1:\n%s", got, errs[0], errs[1])
		}
		return got, errs[1].String()
	}
	a, _ := runJob([2]string{"", ""})
	b, _ := runJob([2]string{"", ""})
	for _, ids := range [][]string{a, b} {
		if !regexp.MustCompile(`^nodes-[0-9a-f]{16}$`).MatchString(ids[0]) || slices.Compact(slices.Clone(ids))[0] != ids[0] || len(slices.Compact(slices.Clone(ids))) != 1 {
			t.Errorf("run ids %q: want one fresh nodes-<16 hex> id on every rank", ids)
		}
	}
	if a[0] == b[0] {
		t.Errorf("two jobs share the run id %s", a[0])
	}
	c, n1 := runJob([2]string{"mine", "theirs"})
	if len(slices.Compact(c)) != 1 || c[0] != "mine" {
		t.Errorf("run ids %q, want node 0's RINGDDP_RUN_ID on every rank", c)
	}
	if !strings.Contains(n1, "launch: node 1: RINGDDP_RUN_ID=theirs here; the job runs under node 0's run id mine") {
		t.Errorf("node 1 does not say whose run id runs:\n%s", n1)
	}
}
