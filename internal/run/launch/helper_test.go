package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/freeport"
)

// The tests start this test binary as the ranks of real multi-process
// jobs: with RINGDDP_LAUNCH_HELPER set, TestMain runs helperMain instead of
// the tests. Everything goes over 127.0.0.1.
const helperVar = "RINGDDP_LAUNCH_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(launcherVar); spec != "" {
		os.Exit(launcherMain(spec))
	}
	if mode := os.Getenv(helperVar); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain is one rank. Modes:
//
//	allreduce  a few all-reduces of known inputs, checked; prints "rank r of n ok"
//	loop       all-reduces until something fails; prints "ready" after the first
//	runid      prints "run id <RINGDDP_RUN_ID>" and exits 0, unconnected
//	looppid    as loop, 1 ms apart, saying "pid N ready" on stderr after the first
//	fail       the rank RINGDDP_HELPER_FAIL_RANK exits with status 3 once
//	           all are connected; the others sleep (ignoring SIGTERM with
//	           RINGDDP_HELPER_IGNORE_TERM=1)
//	interrupt  prints "ready", waits for an interrupt, prints "got interrupt"
//	           (and exits with status 1 with RINGDDP_HELPER_INTERRUPT_STATUS=1)
//	attack     with what it holds, tries to write a plan into the launchers'
//	           rendezvous at RINGDDP_HELPER_LAUNCHERS and prints the outcome
//	secretgone after connecting, starts a child (mode envcheck) that says
//	           whether it inherited RINGDDP_SECRET
//	elastic    5 all-reduce "steps" reported on the status pipe, failing as
//	           RINGDDP_HELPER_FAILS says (elastic_test.go)
//
// RINGDDP_HELPER_TIMEOUT and RINGDDP_HELPER_CONNECT_TIMEOUT set Options.
// Errors go to stderr with exit status 1.
func helperMain(mode string) int {
	if mode == "interrupt" {
		// Before connecting: the launcher may forward the interrupt as soon
		// as every rank said ready.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		fmt.Println("ready")
		<-sig
		fmt.Println("got interrupt")
		if os.Getenv("RINGDDP_HELPER_INTERRUPT_STATUS") == "1" {
			return 1 // as a rank whose collective was cut short by the stop
		}
		return 0
	}
	if mode == "elastic" {
		return helperElastic()
	}
	if mode == "runid" { // says its run id and exits
		fmt.Printf("run id %s\n", os.Getenv(EnvRunID))
		return 0
	}
	if mode == "envcheck" { // a rank's child: what it inherited
		_, set := os.LookupEnv(EnvSecret)
		fmt.Printf("child sees %s: %v\n", EnvSecret, set)
		return 0
	}
	var opts Options
	if d, err := time.ParseDuration(os.Getenv("RINGDDP_HELPER_TIMEOUT")); err == nil {
		opts.Timeout = d
	}
	if d, err := time.ParseDuration(os.Getenv("RINGDDP_HELPER_CONNECT_TIMEOUT")); err == nil {
		opts.ConnectTimeout = d
	}
	ctx := context.Background()
	// Started as a foreign launcher would (LOCAL_WORLD_SIZE, no
	// GOMAXPROCS): take this rank's share of the cores, as the commands do.
	if env, err := rendezvous.FromEnv(os.Getenv); err == nil {
		ShareCores(env, os.Getenv)
	}
	conn, env, err := Connect(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	g, err := allreduce.NewGroup(conn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer g.Close()
	switch mode {
	case "allreduce":
		err = helperAllReduce(ctx, g)
		if err == nil {
			// Rank 0 hosts the store: leave together.
			err = allreduce.Barrier(ctx, g)
		}
		if err == nil {
			fmt.Printf("rank %d of %d ok (local %d of %d)\n", env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize)
			fmt.Fprintf(os.Stderr, "GOMAXPROCS=%d\n", runtime.GOMAXPROCS(0))
			fmt.Fprintf(os.Stderr, "a line on rank %d's stderr\n", env.Rank)
			fmt.Print("no newline at the end")
		}
	case "looppid": // loop, saying "pid N ready" after the first all-reduce
		buf := make([]float32, 1<<10)
		for i := 0; err == nil; i++ {
			err = allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
			if i == 0 && err == nil {
				fmt.Fprintf(os.Stderr, "pid %d ready\n", os.Getpid())
			}
			time.Sleep(time.Millisecond)
		}
	case "loop":
		buf := make([]float32, 64<<10)
		for i := 0; err == nil; i++ {
			err = allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
			if i == 0 && err == nil {
				fmt.Println("ready")
			}
		}
	case "fail":
		if os.Getenv("RINGDDP_HELPER_IGNORE_TERM") == "1" {
			signal.Ignore(syscall.SIGTERM)
		}
		// Once every rank is connected, the failing rank exits at once,
		// as a crash or log.Fatal would; the others, idle, notice nothing,
		// so it is the only rank that fails on its own.
		if err = allreduce.Barrier(ctx, g); err != nil {
			break
		}
		if strconv.Itoa(env.Rank) == os.Getenv("RINGDDP_HELPER_FAIL_RANK") {
			fmt.Println("failing on purpose")
			os.Exit(3)
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "secretgone":
		err = helperSecretGone(ctx, g, env.Rank)
	case "attack":
		err = helperAttack(ctx, g, env)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper rank %d: %v\n", env.Rank, err)
		return 1
	}
	return 0
}

// helperAllReduce sums rank-dependent integers (exact in float32) at a few
// lengths, around the ring's chunking, and checks every element.
func helperAllReduce(ctx context.Context, g *allreduce.Group) error {
	n, r := g.Size(), g.Rank()
	for _, count := range []int{0, 1, n - 1, n + 1, 1000, 1<<18 + 3} {
		buf := make([]float32, count)
		for i := range buf {
			buf[i] = float32((i%97)*(r+1) + r)
		}
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
			return err
		}
		for i, got := range buf {
			want := 0
			for q := range n {
				want += (i%97)*(q+1) + q
			}
			if got != float32(want) {
				return fmt.Errorf("count %d: element %d = %v, want %d", count, i, got, want)
			}
		}
	}
	return nil
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers, which calls
// onLine for every complete line.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	part   []byte
	onLine func(string)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.onLine != nil {
		l.part = append(l.part, p...)
		for {
			i := bytes.IndexByte(l.part, '\n')
			if i < 0 {
				break
			}
			l.onLine(string(l.part[:i]))
			l.part = l.part[i+1:]
		}
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeLoopbackPort picks a free port on 127.0.0.1 for a store or the
// launchers' rendezvous (freeport.Loopback).
func freeLoopbackPort(t *testing.T) int { return freeport.Loopback(t) }

// rankProc is a rank started directly by a test (no launcher), so that
// its own exit status and output can be checked.
type rankProc struct {
	rank   int
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	ready  chan struct{}
	exited chan struct{}
	at     time.Time // when it exited
	err    error     // cmd.Wait's
}

// startRanks starts n helper ranks in mode with torchrun-style variables
// on loopback; extra(rank) adds variables per rank.
func startRanks(t *testing.T, n int, mode string, extra func(rank int) []string) []*rankProc {
	t.Helper()
	port := strconv.Itoa(freeLoopbackPort(t))
	procs := make([]*rankProc, n)
	for r := range n {
		p := &rankProc{rank: r, ready: make(chan struct{}), exited: make(chan struct{}), stderr: &lockedBuffer{}}
		var once sync.Once
		p.stdout = &lockedBuffer{onLine: func(s string) {
			if s == "ready" {
				once.Do(func() { close(p.ready) })
			}
		}}
		env := append(filterEnv(os.Environ(), launchVars),
			helperVar+"="+mode,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
			EnvSecret+"=launch helper test secret", EnvRunID+"=test")
		if extra != nil {
			env = append(env, extra(r)...)
		}
		p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		p.cmd.Env = env
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		p.cmd.SysProcAttr = sysProcAttr()
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			p.at = time.Now()
			close(p.exited)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		})
		procs[r] = p
	}
	return procs
}

// waitExit waits for p to exit, failing the test after d.
func (p *rankProc) waitExit(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("rank %d still running after %v\nstdout: %s\nstderr: %s", p.rank, d, p.stdout, p.stderr)
	}
}

func (p *rankProc) exitCode() int {
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// helperConfig is a launcher Config that starts helper ranks in mode.
func helperConfig(ranks int, mode string, extra ...string) (Config, *lockedBuffer, *lockedBuffer) {
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	return Config{
		Ranks:     ranks,
		Path:      os.Args[0],
		Args:      []string{"-test.run=^$"},
		Env:       append([]string{helperVar + "=" + mode}, extra...),
		Stdout:    stdout,
		Stderr:    stderr,
		NoSignals: true,
		Getenv:    func(string) string { return "" },
	}, stdout, stderr
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// helperSecretGone starts a child of this rank, once connected, that
// reports whether RINGDDP_SECRET reached it, and prints its answer.
func helperSecretGone(ctx context.Context, g *allreduce.Group, rank int) error {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperVar+"=envcheck")
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	_, set := os.LookupEnv(EnvSecret)
	fmt.Printf("rank %d: %s: %s in own env: %v\n", rank, strings.TrimSpace(string(out)), EnvSecret, set)
	return allreduce.Barrier(ctx, g)
}

// helperAttack is a rank turned hostile: with the secret it was given, it
// dials the launchers' rendezvous and tries to publish a plan there.
func helperAttack(ctx context.Context, g *allreduce.Group, env rendezvous.Env) error {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := rendezvous.DialStore(c, os.Getenv("RINGDDP_HELPER_LAUNCHERS"), rendezvous.StoreConfig{Secret: env.Secret})
	if err == nil {
		err = st.Set(c, "elastic/1/plan", []byte(`{"attempt":1,"ranks_per_node":8,"members":[0,1],"store_port":9,"run_id":"x"}`))
		st.Close()
		fmt.Printf("rank %d: attack wrote a plan: %v\n", env.Rank, err)
	} else {
		fmt.Printf("rank %d: attack refused: %v\n", env.Rank, errors.Is(err, rendezvous.ErrAuth))
	}
	return allreduce.Barrier(ctx, g)
}
