//go:build linux

package mixed_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
	transporthelp.WaitReady(t, cmds, outs, 30*time.Second)
	took := transporthelp.KillOne(t, cmds, outs, victim, "")
	for r := range cmds {
		if r != victim {
			t.Logf("rank %d exited %v after the kill: %s", r, took[r], strings.TrimSpace(outs[r].String()))
		}
	}
}
