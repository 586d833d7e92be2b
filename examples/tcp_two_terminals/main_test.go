package main

import (
	"bytes"
	"context"
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
			errs[r] = run(ctx, env, 30*time.Second, &outs[r])
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
