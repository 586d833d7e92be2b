package transporthelp

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

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// RankMain is the TestMain of a package whose multi-process tests run its
// test binary again as ranks (StartRanks): with the environment variable
// modeVar unset it runs the tests; set, the process runs modes[value] as
// one rank and exits with its outcome (ExitWith). An unknown mode exits
// with status 2.
func RankMain(m *testing.M, modeVar string, modes map[string]func() error) {
	mode := os.Getenv(modeVar)
	if mode == "" {
		os.Exit(m.Run())
	}
	if run, ok := modes[mode]; ok {
		ExitWith(run())
	}
	fmt.Fprintln(os.Stderr, "unknown", modeVar)
	os.Exit(2)
}

// JoinFromEnv joins, as one rank, the job the environment describes (as
// StartRanks sets it): it connects to the job's store and calls dial with
// the environment and the store. If dial fails, the store is closed;
// otherwise the caller closes it, after the endpoint.
func JoinFromEnv[C any](ctx context.Context, dial func(env rendezvous.Env, store *rendezvous.TCPStore) (C, error)) (C, *rendezvous.TCPStore, error) {
	var none C
	env, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return none, nil, err
	}
	store, err := rendezvous.Connect(ctx, env, "", rendezvous.StoreConfig{})
	if err != nil {
		return none, nil, err
	}
	conn, err := dial(env, store)
	if err != nil {
		store.Close()
		return none, nil, err
	}
	return conn, store, nil
}

// WaitReady waits until every rank has written "ready" (as
// allreducetest.LoopRing does); if one has not within d, it kills them
// all and fails t.
func WaitReady(t *testing.T, cmds []*exec.Cmd, outs []*SyncBuf, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
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
}

// KillOne kills rank victim with SIGKILL and checks that every other rank
// exits with status 1 within a second of the kill, its output naming
// "rank <victim> failed"; one still running 10 s after the kill is killed
// too. It returns how long each rank took to exit after the kill (zero
// for the victim). Failures start with what.
func KillOne(t *testing.T, cmds []*exec.Cmd, outs []*SyncBuf, victim int, what string) []time.Duration {
	t.Helper()
	killed := time.Now()
	if err := cmds[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmds[victim].Wait()
	took := make([]time.Duration, len(cmds))
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
			t.Errorf("%srank %d still running 10 s after the kill", what, r)
		}
		took[r] = time.Since(killed)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%srank %d exited with %v, want status 1", what, r, err)
		}
		if !strings.Contains(outs[r].String(), "rank "+strconv.Itoa(victim)+" failed") {
			t.Errorf("%srank %d's error does not name rank %d: %s", what, r, victim, outs[r])
		}
		if took[r] > time.Second {
			t.Errorf("%srank %d exited %v after the kill, want within a second", what, r, took[r])
		}
	}
	return took
}
