package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/launch"
)

// TestRun runs both ranks, each with its own environment, over loopback
// (goroutines here; processes in the terminals).
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	for r := range 2 {
		vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
			"MASTER_PORT": port, "RINGDDP_SECRET": "the same in both terminals"}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = run(ctx, launch.Options{Getenv: func(k string) string { return vars[k] }, ConnectTimeout: 30 * time.Second}, &outs[r])
		}()
	}
	wg.Wait()
	for r := range 2 {
		require.NoError(t, errs[r])
		require.Contains(t, outs[r].String(), "rank "+strconv.Itoa(r)+" of 2 got the sum [3 30 300]")
	}
}
