package transporthelp

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

// StartRanks starts n copies of this test binary, running no tests, as
// the ranks of one job on loopback: RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT (a free port) and RINGDDP_SECRET set, plus env(r). The
// binary's TestMain tells from env(r) that it is to run as a rank. It
// returns the processes and their combined output, by rank.
func StartRanks(t *testing.T, n int, env func(r int) []string) ([]*exec.Cmd, []*SyncBuf) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*SyncBuf, n)
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "RINGDDP_SECRET=multi-process test secret 0123456789")
		cmd.Env = append(cmd.Env, env(r)...)
		outs[r] = new(SyncBuf)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	return cmds, outs
}

// RunRanks is StartRanks, then waits for every rank: it returns each
// one's output and exit error.
func RunRanks(t *testing.T, n int, env func(r int) []string) ([]*SyncBuf, []error) {
	t.Helper()
	cmds, outs := StartRanks(t, n, env)
	errs := make([]error, n)
	for r, cmd := range cmds {
		errs[r] = cmd.Wait()
	}
	return outs, errs
}

// ExitWith ends a process that ran as a rank: status 0, or 1 with err
// on stderr.
func ExitWith(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// SyncBuf is a bytes.Buffer safe for a process's writes and our reads.
type SyncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *SyncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes is a copy of what was written so far.
func (b *SyncBuf) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
