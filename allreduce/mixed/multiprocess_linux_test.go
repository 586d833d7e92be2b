//go:build linux

package mixed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// The multi-process tests re-execute this test binary as ranks: modeVar
// says what a rank runs ("matrix" or "loop"), hostsVar names every rank's
// simulated host, comma-separated.
const (
	modeVar  = "RINGDDP_MIXED_TEST_MODE"
	hostsVar = "RINGDDP_MIXED_TEST_HOSTS"
)

func TestMain(m *testing.M) {
	switch os.Getenv(modeVar) {
	case "":
		os.Exit(m.Run())
	case "matrix":
		transporthelp.ExitWith(matrixRank())
	case "loop":
		transporthelp.ExitWith(loopRank())
	}
	fmt.Fprintln(os.Stderr, "unknown", modeVar)
	os.Exit(2)
}

// dialFromEnv joins the job the environment describes over a mixed
// endpoint, hosts from hostsVar.
func dialFromEnv(ctx context.Context) (*mixed.Conn, *rendezvous.TCPStore, error) {
	env, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	store, err := rendezvous.Connect(ctx, env, "", rendezvous.StoreConfig{})
	if err != nil {
		return nil, nil, err
	}
	hosts := strings.Split(os.Getenv(hostsVar), ",")
	cfg := tcp.ConfigFromEnv(env, store)
	cfg.Timeout = 20 * time.Second
	cfg.Node = hosts[env.Rank]
	conn, err := mixed.Dial(ctx, mixed.Config{World: cfg, Hosts: hosts})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return conn, store, nil
}

// matrixRank: every algorithm, AllReduce of awkward lengths with every op
// on float32 and int64, compared bit for bit with the reference.
func matrixRank() error {
	ctx := context.Background()
	conn, store, err := dialFromEnv(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	algos, err := allreducetest.RankMatrix(ctx, conn, allreducetest.CrossProcessLengths(conn.Size()),
		func(g *allreduce.Group) error { return allreduce.Barrier(ctx, g) })
	if err != nil {
		return err
	}
	_ = conn.Close()
	fmt.Printf("rank %d (local %d of %d on %s): %d algorithms ok: %v\n", conn.Rank(), conn.LocalRank(), conn.LocalSize(), conn.NodeName(), len(algos), algos)
	return nil
}

// loopRank is a rank of the job a test kills (allreducetest.LoopRing).
func loopRank() error {
	ctx := context.Background()
	conn, store, err := dialFromEnv(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return allreducetest.LoopRing(ctx, conn)
}

func startRanks(t *testing.T, hosts []string, mode string) ([]*exec.Cmd, []*transporthelp.SyncBuf) {
	t.Helper()
	return transporthelp.StartRanks(t, len(hosts), func(r int) []string {
		return []string{modeVar + "=" + mode, hostsVar + "=" + strings.Join(hosts, ","), "GOMAXPROCS=1"}
	})
}

// TestMatrixAcrossProcesses: the AllReduce matrix of every algorithm over
// processes on 2 simulated hosts × 2 ranks, and 1 + 2 ranks.
func TestMatrixAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	for _, hosts := range [][]string{{"a", "a", "b", "b"}, {"a", "b", "b"}} {
		cmds, outs := startRanks(t, hosts, "matrix")
		for r, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Errorf("hosts %v, rank %d: %v\n%s", hosts, r, err, outs[r])
			}
		}
		t.Logf("hosts %v: %s", hosts, strings.TrimSpace(outs[0].String()))
	}
}

// TestKill9AcrossProcesses: kill -9 of rank 1 of 4 (hosts a a b b) in
// the middle of a stream of all-reduces: its host's other rank learns it
// over shm, the other host's ranks over tcp, and every survivor exits
// non-zero within a second, naming rank 1.
func TestKill9AcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	const victim = 1
	cmds, outs := startRanks(t, []string{"a", "a", "b", "b"}, "loop")
	deadline := time.Now().Add(30 * time.Second)
	for r := range cmds {
		for !strings.Contains(outs[r].String(), "ready") {
			if time.Now().After(deadline) {
				for _, c := range cmds {
					_ = c.Process.Kill()
					_ = c.Wait()
				}
				t.Fatalf("rank %d never got ready: %s", r, outs[r])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	killed := time.Now()
	if err := cmds[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmds[victim].Wait()
	for r, cmd := range cmds {
		if r == victim {
			continue
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
			t.Errorf("rank %d still running 10 s after the kill", r)
		}
		el := time.Since(killed)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("rank %d exited with %v, want status 1", r, err)
		}
		if !strings.Contains(outs[r].String(), "rank "+strconv.Itoa(victim)+" failed") {
			t.Errorf("rank %d's error does not name rank %d: %s", r, victim, outs[r])
		}
		if el > time.Second {
			t.Errorf("rank %d exited %v after the kill, want within a second", r, el)
		}
		t.Logf("rank %d exited %v after the kill: %s", r, el, strings.TrimSpace(outs[r].String()))
	}
}
