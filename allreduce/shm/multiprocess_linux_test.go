//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
)

// rankModeVar makes the test binary, re-executed by a multi-process test,
// run as one rank of its job instead of running the tests: "matrix" or
// "loop".
const rankModeVar = "RINGDDP_SHM_TEST_MODE"

func TestMain(m *testing.M) {
	transporthelp.RankMain(m, rankModeVar, map[string]func() error{"matrix": matrixRank, "loop": loopRank})
}

// dialFromEnv joins the job the environment describes over shm.
func dialFromEnv(ctx context.Context) (*shm.Conn, *rendezvous.TCPStore, error) {
	return transporthelp.JoinFromEnv(ctx, func(env rendezvous.Env, store *rendezvous.TCPStore) (*shm.Conn, error) {
		cfg := shm.ConfigFromEnv(env, store)
		cfg.Timeout = 20 * time.Second
		return shm.Dial(ctx, cfg)
	})
}

// matrixRank is one rank of the multi-process matrix (MatrixRank).
func matrixRank() error {
	return transporthelp.MatrixRank(dialFromEnv, func(c *shm.Conn) string { return fmt.Sprintf("rank %d", c.Rank()) })
}

// loopRank is a rank of the job a test kills.
func loopRank() error { return transporthelp.LoopRank(dialFromEnv) }

// rankEnv is the environment of rank r of n on this host, in mode.
func rankEnv(n int, mode string) func(r int) []string {
	return func(r int) []string {
		return []string{"LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=" + strconv.Itoa(n), rankModeVar + "=" + mode, "GOMAXPROCS=1"}
	}
}

// TestMatrixAcrossProcesses: the reduced AllReduce matrix, every
// algorithm shm can run, over 2, 3, 4 and 5 processes.
func TestMatrixAcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	for _, n := range []int{2, 3, 4, 5} {
		outs, errs := transporthelp.RunRanks(t, n, rankEnv(n, "matrix"))
		transporthelp.CheckRanks(t, fmt.Sprintf("%d processes", n), outs, errs)
	}
}

// TestKill9AcrossProcesses: kill -9 of rank 2 of 4 in the middle of a
// stream of all-reduces: every survivor exits non-zero within a second,
// naming rank 2; no process is left, and nothing is left in /dev/shm.
func TestKill9AcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	trials := transporthelp.Trials(5, 20)
	before := devShm(t)
	const n, victim = 4, 2
	for trial := range trials {
		cmds, outs := transporthelp.StartRanks(t, n, rankEnv(n, "loop"))
		transporthelp.WaitReady(t, cmds, outs, 30*time.Second)
		time.Sleep(time.Duration(trial%5) * 7 * time.Millisecond)
		took := transporthelp.KillOne(t, cmds, outs, victim, fmt.Sprintf("trial %d: ", trial))
		for r := range cmds {
			if trial == 0 && r != victim {
				t.Logf("rank %d exited %v after the kill: %s", r, took[r], strings.TrimSpace(lastLine(outs[r].String())))
			}
		}
		for _, cmd := range cmds {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", cmd.Process.Pid)); err == nil {
				t.Errorf("trial %d: process %d still exists", trial, cmd.Process.Pid)
			}
		}
	}
	if after := devShm(t); after != before {
		t.Errorf("/dev/shm changed: %q before, %q after", before, after)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
