package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
)

// startBoth does what the two terminals do: it runs the program at path
// (this program when path is "") with args twice, as ranks 0 and 1 of one
// job on this host, and waits for both. Each rank gets RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT (a free loopback port), a fresh
// RINGDDP_SECRET, then env; its output goes to stdout and stderr. When a
// rank fails the other is killed, and the error names the rank that
// failed first.
func startBoth(ctx context.Context, path string, args, env []string, stdout, stderr io.Writer) error {
	if path == "" {
		var err error
		if path, err = os.Executable(); err != nil {
			return err
		}
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // rank 0's store listens there

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel() // kill the other rank
	}
	for rank := range 2 {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(rank), "WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "RINGDDP_SECRET="+hex.EncodeToString(secret))
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			fail(fmt.Errorf("rank %d: %w", rank, err))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				fail(fmt.Errorf("rank %d: %w", rank, err))
			}
		}()
	}
	wg.Wait()
	return first
}
