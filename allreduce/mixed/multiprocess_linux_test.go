//go:build linux

package mixed_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

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
	transporthelp.RankMain(m, modeVar, map[string]func() error{"matrix": matrixRank, "loop": loopRank})
}

// dialFromEnv joins the job the environment describes over a mixed
// endpoint, hosts from hostsVar.
func dialFromEnv(ctx context.Context) (*mixed.Conn, *rendezvous.TCPStore, error) {
	return transporthelp.JoinFromEnv(ctx, func(env rendezvous.Env, store *rendezvous.TCPStore) (*mixed.Conn, error) {
		hosts := strings.Split(os.Getenv(hostsVar), ",")
		cfg := tcp.ConfigFromEnv(env, store)
		cfg.Timeout = 20 * time.Second
		cfg.Node = hosts[env.Rank]
		return mixed.Dial(ctx, mixed.Config{World: cfg, Hosts: hosts})
	})
}

// matrixRank is one rank of the multi-process matrix (MatrixRank).
func matrixRank() error {
	return transporthelp.MatrixRank(dialFromEnv, func(c *mixed.Conn) string {
		return fmt.Sprintf("rank %d (local %d of %d on %s)", c.Rank(), c.LocalRank(), c.LocalSize(), c.NodeName())
	})
}

// loopRank is a rank of the job a test kills.
func loopRank() error { return transporthelp.LoopRank(dialFromEnv) }

// rankEnv is the environment of a rank of a job on hosts, in mode.
func rankEnv(hosts []string, mode string) func(r int) []string {
	return func(int) []string {
		return []string{modeVar + "=" + mode, hostsVar + "=" + strings.Join(hosts, ","), "GOMAXPROCS=1"}
	}
}

// TestMatrixAcrossProcesses: the AllReduce matrix of every algorithm over
// processes on 2 simulated hosts × 2 ranks, and 1 + 2 ranks.
func TestMatrixAcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	for _, hosts := range [][]string{{"a", "a", "b", "b"}, {"a", "b", "b"}} {
		outs, errs := transporthelp.RunRanks(t, len(hosts), rankEnv(hosts, "matrix"))
		transporthelp.CheckRanks(t, fmt.Sprintf("hosts %v", hosts), outs, errs)
	}
}

// TestKill9AcrossProcesses: kill -9 of rank 1 of 4 (hosts a a b b) in
// the middle of a stream of all-reduces: its host's other rank learns it
// over shm, the other host's ranks over tcp, and every survivor exits
// non-zero within a second, naming rank 1.
func TestKill9AcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	const victim = 1
	hosts := []string{"a", "a", "b", "b"}
	cmds, outs := transporthelp.StartRanks(t, len(hosts), rankEnv(hosts, "loop"))
	transporthelp.WaitReady(t, cmds, outs, 30*time.Second)
	took := transporthelp.KillOne(t, cmds, outs, victim, "")
	for r := range cmds {
		if r != victim {
			t.Logf("rank %d exited %v after the kill: %s", r, took[r], strings.TrimSpace(outs[r].String()))
		}
	}
}
