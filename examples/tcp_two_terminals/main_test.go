package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/freeport"
)

// childVar makes the test binary run main instead of the tests: startBoth
// runs it as the ranks. The rank failVar names exits with status 3 at once.
const (
	childVar = "TCP_TWO_TERMINALS_TEST_CHILD"
	failVar  = "TCP_TWO_TERMINALS_TEST_FAIL_RANK"
)

func TestMain(m *testing.M) {
	if os.Getenv(childVar) == "1" {
		if os.Getenv(failVar) == os.Getenv("RANK") {
			os.Exit(3)
		}
		os.Args = os.Args[:1]
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRun runs both ranks, each with its own environment, over loopback
// (goroutines here; processes in the terminals).
func TestRun(t *testing.T) {
	port := strconv.Itoa(freeport.Loopback(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	for r := range 2 {
		vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
			"MASTER_PORT": port, "RINGDDP_SECRET": "the same in both terminals"}
		env, err := rendezvous.FromEnv(func(k string) string { return vars[k] })
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = run(ctx, env, wait{timeout: 30 * time.Second, every: 15 * time.Second, grace: 10 * time.Second, errOut: io.Discard}, &outs[r])
		}()
	}
	wg.Wait()
	for r := range 2 {
		require.NoError(t, errs[r])
		require.Contains(t, outs[r].String(), "rank "+strconv.Itoa(r)+" of 2 got the sum [3 30 300]")
	}
}

// lockedBuffer is a bytes.Buffer that both ranks' output copiers may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Without RANK the program starts both ranks itself.
func TestStartBoth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr lockedBuffer
	err := startBoth(ctx, os.Args[0], nil, []string{childVar + "=1"}, &stdout, &stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())
	for _, want := range []string{"rank 0 of 2 got the sum [3 30 300]", "rank 1 of 2 got the sum [3 30 300]"} {
		require.Contains(t, stdout.String(), want)
	}

	// A rank that fails is named, and the other, waiting for it to
	// connect (up to a minute), is stopped at once.
	start := time.Now()
	err = startBoth(ctx, os.Args[0], nil, []string{childVar + "=1", failVar + "=1"}, &stdout, &stderr)
	require.EqualError(t, err, "rank 1: exit status 3")
	require.Less(t, time.Since(start), 30*time.Second)
}

// envOf is the Env of rank r of two meeting at port with secret.
func envOf(t *testing.T, r int, port, secret string) rendezvous.Env {
	vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
		"MASTER_PORT": port, "RINGDDP_SECRET": secret}
	env, err := rendezvous.FromEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	return env
}

// A rank given another secret fails at once; rank 0 says so as it happens
// and gives up the grace period later, naming it.
func TestWrongSecret(t *testing.T) {
	port := strconv.Itoa(freeport.Loopback(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	var stderr [2]lockedBuffer
	took := make([]time.Duration, 2)
	secrets := []string{"the secret of rank 0, long enough", "another secret, given to rank 1"}
	for r := range 2 {
		env := envOf(t, r, port, secrets[r])
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 1 {
				time.Sleep(200 * time.Millisecond) // rank 0's store is up
			}
			start := time.Now()
			errs[r] = run(ctx, env, wait{timeout: 30 * time.Second, every: 300 * time.Millisecond, grace: time.Second, errOut: &stderr[r]}, io.Discard)
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	require.ErrorContains(t, errs[1], "authentication failed")
	require.ErrorContains(t, errs[0], "was it given another RINGDDP_SECRET?")
	require.ErrorContains(t, errs[0], "1 failed authentication")
	require.Contains(t, stderr[0].String(), "rank 0: the store turned away 1 connection (1 failed authentication) from 127.0.0.1 (1)")
	require.Less(t, took[0], 10*time.Second)
	require.Less(t, took[1], 5*time.Second)
}

// A rank alone says what it waits for as it waits.
func TestWaitingReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, want := range []string{"rank 0: still waiting for the other rank", "rank 1: still waiting for rank 0's store at 127.0.0.1:"} {
		var stderr lockedBuffer
		env := envOf(t, r, strconv.Itoa(freeport.Loopback(t)), "the same in both terminals")
		err := run(ctx, env, wait{timeout: 1500 * time.Millisecond, every: 300 * time.Millisecond, grace: time.Second, errOut: &stderr}, io.Discard)
		require.Error(t, err)
		require.Contains(t, stderr.String(), want)
		if r == 1 {
			require.Contains(t, stderr.String(), "connection refused")
		}
	}
}
