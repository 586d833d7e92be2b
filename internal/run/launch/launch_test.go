package launch

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// The launcher starts 3 ranks that all-reduce correctly; rank 0's stdout
// comes through unprefixed, every other line with its rank's prefix, and
// a last line without a newline is completed.
func TestLaunchAllReduce(t *testing.T) {
	t.Parallel()
	cfg, stdout, stderr := helperConfig(3, "allreduce")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	out := lines(stdout.String())
	for r := range 3 {
		prefix := ""
		if r > 0 {
			prefix = fmt.Sprintf("[rank %d] ", r)
		}
		for _, want := range []string{fmt.Sprintf("%srank %d of 3 ok (local %d of 3)", prefix, r, r), prefix + "no newline at the end"} {
			if !slices.Contains(out, want) {
				t.Errorf("stdout lacks the line %q:\n%s", want, stdout)
			}
		}
		if want := fmt.Sprintf("[rank %d] a line on rank %d's stderr", r, r); !slices.Contains(lines(stderr.String()), want) {
			t.Errorf("stderr lacks the line %q:\n%s", want, stderr)
		}
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		want := fmt.Sprintf("[rank 2] GOMAXPROCS=%d", max(1, runtime.GOMAXPROCS(0)/3))
		if !slices.Contains(lines(stderr.String()), want) {
			t.Errorf("stderr lacks %q: the host's processors are not shared among the ranks:\n%s", want, stderr)
		}
	}
	if len(out) != 6 {
		t.Errorf("stdout has %d lines, want 6:\n%s", len(out), stdout)
	}
}

// Two launchers, as on two hosts (over loopback here), make one job of
// 2 × 2 ranks with the secret from the environment.
func TestLaunchTwoNodes(t *testing.T) {
	t.Parallel()
	master := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]*lockedBuffer, 2)
	for node := range 2 {
		cfg, stdout, stderr := helperConfig(2, "allreduce")
		cfg.Nnodes, cfg.NodeRank, cfg.Master = 2, node, master
		cfg.Getenv = func(k string) string {
			return map[string]string{EnvSecret: "shared by both nodes", EnvRunID: "two-nodes"}[k]
		}
		outs[node] = stdout
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[node] = Run(ctx, cfg); errs[node] != nil {
				errs[node] = fmt.Errorf("node %d: %w\nstdout:\n%s\nstderr:\n%s", node, errs[node], stdout, stderr)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{
		{"rank 0 of 4 ok (local 0 of 2)", "[rank 1] rank 1 of 4 ok (local 1 of 2)"},
		{"[rank 2] rank 2 of 4 ok (local 0 of 2)", "[rank 3] rank 3 of 4 ok (local 1 of 2)"},
	}
	for node, ws := range want {
		for _, w := range ws {
			if !slices.Contains(lines(outs[node].String()), w) {
				t.Errorf("node %d's stdout lacks %q:\n%s", node, w, outs[node])
			}
		}
	}
}

// A rank that exits non-zero makes the launcher stop the others and fail
// naming it; ranks that ignore SIGTERM are killed after the grace period.
func TestLaunchChildFailure(t *testing.T) {
	t.Parallel()
	for _, ignoreTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore_sigterm=%v", ignoreTerm), func(t *testing.T) {
			t.Parallel()
			extra := []string{"RINGDDP_HELPER_FAIL_RANK=1"}
			if ignoreTerm {
				extra = append(extra, "RINGDDP_HELPER_IGNORE_TERM=1")
			}
			cfg, stdout, stderr := helperConfig(3, "fail", extra...)
			cfg.Grace = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			err := Run(ctx, cfg)
			took := time.Since(start)
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("Run = %v, want an *ExitError\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			if ee.Rank != 1 || ee.State == nil || ee.State.ExitCode() != 3 {
				t.Errorf("failure of rank %d (%v), want rank 1 with status 3", ee.Rank, ee.State)
			}
			if !regexp.MustCompile(`^launch: rank 1 \(pid \d+\) exited with status 3$`).MatchString(err.Error()) {
				t.Errorf("error %q does not say which rank failed and how", err)
			}
			if !strings.Contains(stderr.String(), "launch: rank 1 (pid") || !strings.Contains(stderr.String(), "stopping the other ranks") {
				t.Errorf("stderr does not report the failure:\n%s", stderr)
			}
			if !slices.Contains(lines(stdout.String()), "[rank 1] failing on purpose") {
				t.Errorf("stdout lacks rank 1's prefixed line:\n%s", stdout)
			}
			// The others sleep for an hour unless stopped.
			if took > 30*time.Second {
				t.Errorf("Run took %v to stop the other ranks", took)
			}
		})
	}
}

// An interrupt to the launcher reaches every rank once.
func TestLaunchForwardsInterrupt(t *testing.T) {
	stdout, stderr, err := interruptJob(t)
	if err != nil {
		t.Fatalf("Run = %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"got interrupt", "[rank 1] got interrupt"} {
		if !slices.Contains(lines(stdout.String()), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// Ranks that exit non-zero when interrupted (as cmd/train's do over tcp)
// end the job with an error that says the job was interrupted, not one that
// reads as if a rank had failed on its own.
func TestInterruptedJobSaysInterrupted(t *testing.T) {
	stdout, stderr, err := interruptJob(t, "RINGDDP_HELPER_INTERRUPT_STATUS=1")
	if err == nil {
		t.Fatalf("Run = nil, want the interrupt\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	for _, want := range []string{"stopped by interrupt", "the job was interrupted", "exited with status 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %q, lacks %q", err, want)
		}
	}
}

// interruptJob runs two "interrupt" helper ranks, sends this process
// SIGINT once both are ready, and returns what Run returned.
func interruptJob(t *testing.T, env ...string) (stdout, stderr *lockedBuffer, err error) {
	cfg, stdout, stderr := helperConfig(2, "interrupt", env...)
	cfg.NoSignals = false
	var mu sync.Mutex
	ready := 0
	allReady := make(chan struct{})
	stdout.onLine = func(s string) {
		if strings.HasSuffix(s, "ready") {
			mu.Lock()
			if ready++; ready == cfg.Ranks {
				close(allReady)
			}
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case <-allReady:
	case err := <-done:
		t.Fatalf("Run returned early: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("ranks not ready:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// Run is catching interrupts until its ranks exit, which they do only
	// once they get one.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	return stdout, stderr, <-done
}

// killTrials is how many times TestKillRankMidAllReduce kills a rank: 20
// (about 3 s with -race on 2 cores), 3 with -short.
func killTrials() int {
	if testing.Short() {
		return 3
	}
	return 20
}

// A rank killed with SIGKILL in the middle of all-reduces makes every
// survivor exit non-zero, naming the dead rank (or the peer that told it),
// well within the transport timeout plus 5 s.
func TestKillRankMidAllReduce(t *testing.T) {
	const n, timeout = 4, 2 * time.Second
	trials := killTrials()
	named := 0
	for trial := range trials {
		victim := trial % n
		procs := startRanks(t, n, "loop", func(int) []string {
			return []string{"RINGDDP_HELPER_TIMEOUT=" + timeout.String(), "RINGDDP_HELPER_CONNECT_TIMEOUT=30s"}
		})
		for _, p := range procs {
			select {
			case <-p.ready:
			case <-p.exited:
				t.Fatalf("trial %d: rank %d exited before its first all-reduce: %v\n%s", trial, p.rank, p.err, p.stderr)
			case <-time.After(30 * time.Second):
				t.Fatalf("trial %d: rank %d not ready\n%s", trial, p.rank, p.stderr)
			}
		}
		// Every rank is looping over all-reduces of 256 KiB: the kill lands
		// in the middle of one.
		time.Sleep(time.Duration(trial%5) * 7 * time.Millisecond)
		if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		deadline := timeout + 5*time.Second
		for _, p := range procs {
			if p.rank == victim {
				continue
			}
			p.waitExit(t, deadline+time.Second)
			msg := p.stderr.String()
			if took := p.at.Sub(killed); took > deadline {
				t.Errorf("trial %d: rank %d took %v to fail after rank %d was killed", trial, p.rank, took, victim)
			}
			if p.exitCode() != 1 {
				t.Errorf("trial %d: rank %d exited with %d, want 1:\n%s", trial, p.rank, p.exitCode(), msg)
			}
			switch {
			case strings.Contains(msg, fmt.Sprintf("rank %d failed", victim)):
				named++
			case regexp.MustCompile(`rank \d failed`).MatchString(msg):
			default:
				t.Errorf("trial %d: rank %d's error names no failed rank:\n%s", trial, p.rank, msg)
			}
		}
	}
	t.Logf("%d trials of %d ranks: %d of %d survivors named the killed rank", trials, n, named, trials*(n-1))
}

// A rank that stops responding (SIGSTOP: alive, connections open) makes
// the others fail once the transport timeout passes without progress,
// and every survivor names it and the call it never completed, whichever
// survivor gave up first: a survivor waiting on another survivor (in the
// ring, rank 0 receives from rank 2, which waits on rank 1) follows the
// stall notices to rank 1.
func TestStalledRank(t *testing.T) {
	t.Parallel()
	const n, timeout = 3, 2 * time.Second
	procs := startRanks(t, n, "loop", func(int) []string {
		return []string{"RINGDDP_HELPER_TIMEOUT=" + timeout.String(), "RINGDDP_HELPER_CONNECT_TIMEOUT=30s"}
	})
	for _, p := range procs {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Fatalf("rank %d exited before its first all-reduce: %v\n%s", p.rank, p.err, p.stderr)
		case <-time.After(30 * time.Second):
			t.Fatalf("rank %d not ready\n%s", p.rank, p.stderr)
		}
	}
	if err := procs[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for _, p := range []*rankProc{procs[0], procs[2]} {
		p.waitExit(t, timeout+10*time.Second)
		msg := p.stderr.String()
		// Its last progress may predate the stop a little; it listens
		// for its peers' stall notices for up to half a second after its
		// timeout (and a loaded machine may add some).
		if took := p.at.Sub(stopped); took < timeout/2 || took > timeout+2*time.Second {
			t.Errorf("rank %d failed %v after rank 1 stalled, want about %v (at most %v)", p.rank, took, timeout, timeout+2*time.Second)
		}
		if p.exitCode() != 1 || !regexp.MustCompile(`rank 1 never completed #\d+ AllReduce`).MatchString(msg) {
			t.Errorf("rank %d: exit %d, want 1 and an error naming rank 1 and its call:\n%s", p.rank, p.exitCode(), msg)
		}
		t.Logf("rank %d after %v: %s", p.rank, p.at.Sub(stopped).Round(time.Millisecond), strings.TrimSpace(msg))
	}
}

// A rank with the wrong secret is refused with a clear error; nobody hangs.
func TestWrongSecret(t *testing.T) {
	t.Parallel()
	for _, bad := range []int{1, 0} { // a joining rank; the store's host
		t.Run(fmt.Sprintf("rank=%d", bad), func(t *testing.T) {
			t.Parallel()
			const n, connectTimeout = 3, 3 * time.Second
			procs := startRanks(t, n, "allreduce", func(r int) []string {
				env := []string{"RINGDDP_HELPER_CONNECT_TIMEOUT=" + connectTimeout.String()}
				if r == bad {
					env = append(env, EnvSecret+"=not-the-job-secret")
				}
				return env
			})
			for _, p := range procs {
				p.waitExit(t, connectTimeout+20*time.Second)
				if p.exitCode() != 1 {
					t.Errorf("rank %d exited with %d, want 1\n%s", p.rank, p.exitCode(), p.stderr)
				}
			}
			msg := procs[1].stderr.String()
			if !strings.Contains(msg, "secret") && !strings.Contains(msg, "authentica") {
				t.Errorf("rank 1's error does not say the secret is wrong:\n%s", msg)
			}
			for _, p := range procs {
				t.Logf("rank %d: %s", p.rank, strings.TrimSpace(p.stderr.String()))
			}
		})
	}
}

func TestSetup(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	rank := env("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1")
	mpi := env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "3", "MASTER_ADDR", "127.0.0.1")
	for _, c := range []struct {
		name       string
		f          Flags
		ranks      int
		given      bool
		getenv     func(string) string
		launcher   bool
		world, loc int
		err        string
	}{
		{name: "launcher", f: Flags{Nnodes: 1}, ranks: 4, getenv: env(), launcher: true, world: 4, loc: 4},
		{name: "two nodes", f: Flags{Nnodes: 2, NodeRank: 1, Master: "10.0.0.1:29500"}, ranks: 3, getenv: env(EnvSecret, "s"), launcher: true, world: 6, loc: 3},
		{name: "two nodes without secret", f: Flags{Nnodes: 2, Master: "h:1"}, ranks: 2, getenv: env(), err: "RINGDDP_SECRET"},
		{name: "two nodes insecure", f: Flags{Nnodes: 2, Master: "h:1", Insecure: true}, ranks: 2, getenv: env(), launcher: true, world: 4, loc: 2},
		{name: "two nodes without master", f: Flags{Nnodes: 2}, ranks: 2, getenv: env(EnvSecret, "s"), err: "-master"},
		{name: "bad master", f: Flags{Nnodes: 1, Master: "nohost"}, ranks: 2, getenv: env(), err: "host:port"},
		{name: "node rank out of range", f: Flags{Nnodes: 2, NodeRank: 2, Master: "h:1"}, ranks: 2, getenv: env(EnvSecret, "s"), err: "-node-rank 2"},
		{name: "insecure with secret", f: Flags{Nnodes: 1, Insecure: true}, ranks: 2, getenv: env(EnvSecret, "s"), err: "both"},
		{name: "rank, -ranks default", f: Flags{Nnodes: 1}, ranks: 4, getenv: rank, world: 2},
		{name: "rank, -ranks agrees", f: Flags{Nnodes: 1}, ranks: 2, given: true, getenv: rank, world: 2},
		{name: "rank, -ranks disagrees", f: Flags{Nnodes: 1}, ranks: 4, given: true, getenv: rank, err: "-ranks 4 disagrees with the launcher's world size WORLD_SIZE=2"},
		{name: "rank, nodes × ranks agree", f: Flags{Nnodes: 2, NodeRank: 1, Master: "h:1"}, ranks: 1, given: true, getenv: rank, world: 2},
		{name: "mpirun, -ranks disagrees", f: Flags{Nnodes: 1}, ranks: 2, given: true, getenv: mpi, err: "OMPI_COMM_WORLD_SIZE=3"},
		{name: "bad env", f: Flags{Nnodes: 1}, ranks: 2, getenv: env("RANK", "x", "WORLD_SIZE", "2"), err: "RANK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.f.Setup(c.ranks, c.given, c.getenv)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Launcher != c.launcher || s.WorldSize != c.world || (c.launcher && s.LocalRanks != c.loc) {
				t.Errorf("launcher %v world %d local %d, want %v %d %d", s.Launcher, s.WorldSize, s.LocalRanks, c.launcher, c.world, c.loc)
			}
			if !c.launcher && s.Env.Rank != 1 {
				t.Errorf("rank %d, want 1", s.Env.Rank)
			}
		})
	}
}

func TestRunID(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{}, DefaultRunID},
		{map[string]string{"SLURM_JOB_ID": "77"}, "77"},
		{map[string]string{"SLURM_JOB_ID": "77", "TORCHELASTIC_RUN_ID": "te"}, "te"},
		{map[string]string{"SLURM_JOB_ID": "77", "TORCHELASTIC_RUN_ID": "te", EnvRunID: "mine"}, "mine"},
	} {
		if got := RunID(func(k string) string { return c.vars[k] }); got != c.want {
			t.Errorf("RunID(%v) = %q, want %q", c.vars, got, c.want)
		}
	}
}

func TestConnectRefusesBadSecurity(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		vars map[string]string
		opts Options
		want string
	}{
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, Options{}, "RINGDDP_SECRET is not set"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", EnvSecret: "s", EnvInsecure: "1"}, Options{}, "both set"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", EnvSecret: "s"}, Options{Insecure: true}, "both set"},
		{map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", EnvInsecure: "maybe"}, Options{}, "RINGDDP_INSECURE"},
	} {
		c.opts.Getenv = func(k string) string { return c.vars[k] }
		_, _, err := Connect(ctx, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Connect(%v) = %v, want an error containing %q", c.vars, err, c.want)
		}
	}
}

// Without launcher variables Connect is a job of one.
func TestConnectSingle(t *testing.T) {
	conn, env, err := Connect(context.Background(), Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Rank() != 0 || conn.Size() != 1 || env.Found {
		t.Errorf("rank %d of %d (found %v), want 0 of 1", conn.Rank(), conn.Size(), env.Found)
	}
}

func TestJobVars(t *testing.T) {
	none := func(string) string { return "" }
	get := func(vars []string, k string) string {
		for _, kv := range vars {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	a, aln, err := jobVars(Config{Ranks: 2, Nnodes: 1}, none)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	b, bln, err := jobVars(Config{Ranks: 2, Nnodes: 1}, none)
	if err != nil {
		t.Fatal(err)
	}
	defer bln.Close()
	// The store's port stays bound by the launcher until rank 0 has it.
	if _, err := net.Listen("tcp", "127.0.0.1:"+get(a, "MASTER_PORT")); err == nil {
		t.Error("the store's port could be taken by another process")
	}
	if s := get(a, EnvSecret); len(s) != 64 || s == get(b, EnvSecret) {
		t.Errorf("secrets %q and %q: want fresh 32-byte hex secrets", s, get(b, EnvSecret))
	}
	if get(a, "MASTER_ADDR") != "127.0.0.1" || get(a, "MASTER_PORT") == "0" || !strings.HasPrefix(get(a, EnvRunID), "standalone-") {
		t.Errorf("single-host variables %v", a)
	}
	m, _, err := jobVars(Config{Ranks: 2, Nnodes: 2, Master: "node0:1234"}, func(k string) string {
		return map[string]string{EnvSecret: "shared"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	// The ranks get a secret derived from the job's (which only the
	// launchers hold): HMAC-SHA256 under the rank-secret label, in hex.
	mac := hmac.New(sha256.New, []byte("shared"))
	mac.Write([]byte("ringddp/launch/rank-secret/v1"))
	if got, want := get(m, EnvSecret), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("the ranks' secret %q, want %q (derived, never the job's own)", got, want)
	}
	if get(m, "MASTER_ADDR") != "node0" || get(m, "MASTER_PORT") != "1234" || get(m, EnvRunID) != "" {
		t.Errorf("multi-host variables %v", m)
	}
	if _, _, err := jobVars(Config{Ranks: 2, Nnodes: 2, Master: "node0:1234"}, none); err == nil {
		t.Error("multi-host job without RINGDDP_SECRET: no error")
	}
	ins, _, err := jobVars(Config{Ranks: 2, Nnodes: 2, Master: "node0:1234", Insecure: true}, none)
	if err != nil || get(ins, EnvInsecure) != "1" || get(ins, EnvSecret) != "" {
		t.Errorf("insecure: %v, %v", ins, err)
	}
}

func TestLineWriter(t *testing.T) {
	var out lockedBuffer
	lw := &lineWriter{dst: &out, prefix: "[rank 2] "}
	for _, p := range []string{"one\ntw", "o\n", "", "three", "\nfour\nfive"} {
		lw.Write([]byte(p))
	}
	lw.flush()
	if got, want := out.String(), "[rank 2] one\n[rank 2] two\n[rank 2] three\n[rank 2] four\n[rank 2] five\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFilterEnv(t *testing.T) {
	got := filterEnv([]string{"RANK=1", "RANKS=2", "PATH=/bin", "MASTER_PORT=3"}, launchVars)
	if !slices.Equal(got, []string{"RANKS=2", "PATH=/bin"}) {
		t.Errorf("filterEnv = %v", got)
	}
}

// A rank that runs without a secret says so on its warnings stream.
func TestInsecureWarns(t *testing.T) {
	var warn strings.Builder
	env := rendezvous.Env{Rank: 0, WorldSize: 1, LocalWorldSize: 1}
	c, _, err := Connect(context.Background(), Options{Insecure: true, Env: &env, Warnings: &warn,
		Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !strings.Contains(warn.String(), "WARNING: rank 0 runs WITHOUT a secret") {
		t.Errorf("warnings %q", warn.String())
	}
}
