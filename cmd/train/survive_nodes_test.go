package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
)

// Survivors continue across node launchers: 2 nodes × 2 ranks on
// loopback (-nnodes 2), -on-failure continue.

// nodesSurvivorArgs are the arguments of a 2 × 2 job that continues.
func nodesSurvivorArgs(data, ck, tr string, extra ...string) []string {
	args := []string{"-transport", tr, "-ranks", "2", "-on-failure", "continue", "-data", data, "-batch", "24",
		"-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "adam", "-checkpoint", ck}
	return append(args, extra...)
}

// nodeJob starts a 2 × 2 job that continues (nodesSurvivorArgs over tcp
// with args) under the fault plan faults; see nodeJobEnv.
func nodeJob(t *testing.T, faults string, args ...string) []*nodeLauncher {
	t.Helper()
	nodes, _ := nodeJobEnv(t, 2, "tcp", faults, nil, args...)
	return nodes
}

// nodeJobEnv starts a job that continues (nodesSurvivorArgs with args)
// on nnodes launchers over transport tr, under the fault plan faults
// (RINGDDP_FAULTS) and with nodeEnv(i) (nil: none) added to node i's
// environment. It skips the test under -race or -short (such a job runs
// for seconds), logs every launcher's stderr if the test fails, and
// returns the launchers and the folder of the job's checkpoints.
func nodeJobEnv(t *testing.T, nnodes int, tr, faults string, nodeEnv func(int) []string, args ...string) ([]*nodeLauncher, string) {
	t.Helper()
	if raceEnabled || testing.Short() {
		t.Skip("a job of node launchers, several ranks for seconds: not under -race or -short")
	}
	data := writeMNISTDir(t)
	dir := t.TempDir()
	t.Setenv(faultsVar, faults)
	nodes := startNodesEnv(t, nnodes, nodeEnv, nodesSurvivorArgs(data, filepath.Join(dir, "ck.safetensors"), tr, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d's stderr:\n%s", i, n.stderr.String())
			}
		}
	})
	return nodes, dir
}

// node0Ended waits for node 0's launcher (at most d), requires it to
// have ended cleanly and returns its stdout and stderr.
func node0Ended(t *testing.T, nodes []*nodeLauncher, d time.Duration) (string, string) {
	t.Helper()
	waitNodes(t, nodes[:1], d)
	out, errOut := nodes[0].stdout.String(), nodes[0].stderr.String()
	require.NoError(t, nodes[0].err, "stdout:\n%s\nstderr:\n%s", out, errOut)
	return out, errOut
}

// oneSurvived checks the stdout of a 2-epoch job of batch 24 that
// survived one failure, leaving ranks ranks: no restart, no completed
// step lost, every example used once per epoch; it returns the failure's
// record.
func oneSurvived(t *testing.T, out string, ranks int) continueRecord {
	t.Helper()
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 1, out)
	c := survived[0]
	require.Equal(t, 1, c.Generation, out)
	require.Equal(t, ranks, c.Ranks, out)
	require.Equal(t, int64(0), c.StepsLost, out)
	require.Equal(t, float64(ranks), epochs[1]["ranks"], out)
	requireEachSampleOnce(t, epochs, 24)
	return c
}

// A rank of node 1 (rank 3) killed after step 7: node 1's launcher
// reports its exit to node 0's, the other three continue as generation 1
// and finish; nothing is lost, each example is used once per epoch, node
// 1's launcher ends cleanly with its remaining rank.
func TestSurviveNodesRankKilled(t *testing.T) {
	nodes := nodeJob(t, "kill:3:7:0")
	waitNodes(t, nodes, 20*time.Second)
	out := nodes[0].stdout.String()
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d\nstdout:\n%s\nstderr:\n%s", i, n.stdout.String(), n.stderr.String())
	}
	t.Logf("node 0's stderr:\n%s\nnode 1's stderr:\n%s", nodes[0].stderr.String(), nodes[1].stderr.String())
	c := oneSurvived(t, out, 3)
	require.Equal(t, 3, c.FailedRank)
	require.True(t, strings.HasPrefix(c.Reason, "was killed by signal killed on node 1 ("), c.Reason)
}

// startKillNode starts a 2 × 2 job that continues (-min-ranks 2, every
// step at least 30 ms), waits until it has checkpointed step 5, kills
// node's launcher (its ranks die with it: the launcher's death signal)
// and returns the nodes and when it killed.
func startKillNode(t *testing.T, tr string, node int, extra ...string) ([]*nodeLauncher, time.Time) {
	return startKillNodeSlow(t, tr, node, 30, extra...)
}

// startKillNodeSlow is startKillNode with every step at least slowMs ms.
func startKillNodeSlow(t *testing.T, tr string, node, slowMs int, extra ...string) ([]*nodeLauncher, time.Time) {
	return startKillNodeEnv(t, 2, tr, node, slowMs, nil, extra...)
}

// startKillNodeEnv is startKillNodeSlow with nnodes launchers and
// nodeEnv(i) (nil: none) added to node i's environment.
func startKillNodeEnv(t *testing.T, nnodes int, tr string, node, slowMs int, nodeEnv func(int) []string, extra ...string) ([]*nodeLauncher, time.Time) {
	t.Helper()
	args := append([]string{"-min-ranks", "2", "-checkpoint-every", "5", "-checkpoint-keep", "100"}, extra...)
	nodes, dir := nodeJobEnv(t, nnodes, tr, "slow:0:"+strconv.Itoa(slowMs), nodeEnv, args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ck.step5.safetensors")); err == nil {
			break
		}
		select {
		case <-nodes[0].done:
			t.Fatalf("node 0's launcher ended before step 5: %v", nodes[0].err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "no checkpoint at step 5 after 30 s")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, nodes[node].cmd.Process.Signal(syscall.SIGKILL))
	return nodes, time.Now()
}

// Node 1's launcher killed with its ranks (2 and 3) mid-run: their peers
// on node 0 fail their collectives, ranks 2 and 3 do not check in, and
// they drop out together (one generation, each named with node 1); node
// 0's two ranks finish the job without losing a step, and node 0 does not
// wait for node 1's report.
func TestSurviveNodeLost(t *testing.T) {
	nodes, killed := startKillNode(t, "tcp", 1)
	out, errOut := node0Ended(t, nodes, 30*time.Second)
	c := oneSurvived(t, out, 2)
	require.Len(t, c.Removed, 2, out)
	for i, l := range c.Removed {
		require.Equal(t, 2+i, l.Rank)
		require.Contains(t, l.Reason, "on node 1 (", l.Reason)
	}
	require.NotNil(t, c.TrainingAgainUnix)
	again := time.Unix(0, int64(*c.TrainingAgainUnix*1e9)).Sub(killed)
	t.Logf("training again %.3f s after node 1 was killed (%.3f s after node 0 saw the failure)\nnode 0's stderr:\n%s",
		again.Seconds(), *c.TrainingAgainSeconds, errOut)
	require.Contains(t, errOut, "launch: node 0: node 1 left the job: every rank of it was removed: ranks 2, 3; the job continues without node 1")
}

// A launcher restarted for node 1 after the job went on without it, in a
// job without -heal: it is refused at once with why (the job continues
// without node 1; rejoining needs -heal), and node 0 finishes undisturbed.
func TestSurviveNodeRejoinRefused(t *testing.T) {
	rejoinRefused(t, nil, "launch: node 1: the job continues without node 1 (every rank of it was removed: ranks 2, 3); rejoining a running job needs healing")
}

// rejoinRefused starts a 2 × 2 job that continues (startKillNode, extra
// added), kills node 1's launcher and, once node 0 has dropped node 1,
// starts it again with env added to its environment; it
// requires the restarted launcher to fail within 10 s, its stderr
// holding want, and node 0 to finish cleanly; it returns node 0's stderr.
func rejoinRefused(t *testing.T, extra []string, want string, env ...string) string {
	t.Helper()
	nodes, _ := startKillNode(t, "tcp", 1, extra...)
	waitGone(t, nodes)
	began := time.Now()
	back := restartLauncher(t, nodes[1], env...)
	waitNodes(t, []*nodeLauncher{back}, 10*time.Second)
	t.Logf("the restarted launcher, %v after its start:\n%s", time.Since(began), back.stderr.String())
	require.Error(t, back.err)
	require.Contains(t, back.stderr.String(), want)
	_, errOut := node0Ended(t, nodes, 30*time.Second)
	return errOut
}

// Node 0's launcher killed (its ranks die with it) while the job
// continues: node 0 is the single point of failure — it hosts the store
// and decides the plans — so node 1's launcher ends within seconds with
// a line naming node 0, rather than continuing or waiting out timeouts.
func TestSurviveNode0Lost(t *testing.T) {
	nodes, killed := startKillNode(t, "tcp", 0)
	select {
	case <-nodes[1].done:
	case <-time.After(20 * time.Second):
		t.Fatalf("node 1's launcher still running 20 s after node 0's was killed:\n%s", nodes[1].stderr.String())
	}
	took := time.Since(killed)
	errOut := nodes[1].stderr.String()
	t.Logf("node 1's launcher ended %v after node 0's was killed:\n%s", took, errOut)
	require.Error(t, nodes[1].err)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Contains(t, lines[len(lines)-1], "node 0", "node 1's last line does not name node 0")
	require.Less(t, took, 10*time.Second)
}

// Node 1 lost whole with -min-ranks 4 (every rank): the 2 ranks left are
// too few, so the plan falls back to a restart; without -max-restarts the
// job ends within seconds, node 0's last line saying why.
func TestSurviveNodeLostBelowMinRanks(t *testing.T) {
	nodes, killed := startKillNode(t, "tcp", 1, "-min-ranks", "4")
	waitNodes(t, nodes[:1], 20*time.Second)
	errOut := nodes[0].stderr.String()
	t.Logf("node 0 ended %v after node 1 was killed:\n%s", time.Since(killed), errOut)
	require.Error(t, nodes[0].err)
	require.Contains(t, errOut, "2 ranks left, fewer than the minimum of 4 (-min-ranks): falling back to a restart")
	require.NotContains(t, errOut, "the job continues without node 1")
}

// waitGone waits until node 0 has dropped node 1 (the job continues
// without it).
func waitGone(t *testing.T, nodes []*nodeLauncher) {
	t.Helper()
	for !strings.Contains(nodes[0].stderr.String(), "the job continues without node 1") {
		select {
		case <-nodes[0].done:
			t.Fatalf("node 0 ended before it dropped node 1: %v", nodes[0].err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// restartLauncher starts node's launcher again, as it was started.
func restartLauncher(t *testing.T, n *nodeLauncher, env ...string) *nodeLauncher {
	t.Helper()
	old := n.cmd
	cmd := exec.Command(old.Path, old.Args[1:]...)
	cmd.Env = append(slices.Clone(old.Env), env...)
	return startLauncherCmd(t, cmd)
}

// Node 1's launcher killed with its ranks, with -heal: the job continues
// on node 0's two ranks; node 1's launcher, restarted, rejoins — its two
// ranks start as joining ranks 4 and 5, the group grows back to 4 at a
// step boundary and they heal from node 0's ranks — and the job finishes
// on 4 ranks with no completed step lost and every example used once per
// epoch. The rejoined launcher ends cleanly with the job.
func TestSurviveNodeRejoins(t *testing.T) {
	r := rejoinJob(t, 2, "tcp", nil)
	h, epochs, out, errOut := r.h, r.epochs, r.out, r.errOut
	requireNodeJoined(t, h, 4, "node 1 rejoins", out)
	require.Equal(t, 4.0, epochs[5]["ranks"], out)
	require.Contains(t, errOut, "launch: node 0: node 1 is back in the job with ranks 4, 5")
	require.NotNil(t, h.Joined[0].BackSeconds)
	t.Logf("node 1 killed, then restarted %.2f s later; back %.3f s after node 0 admitted it; heal %.3f s (%d bytes of state), members paused %.3f s",
		r.restarted.Sub(r.killed).Seconds(), *h.Joined[0].BackSeconds, h.HealSecs, h.StateBytes, h.Paused)
}

// nodesEnded waits for node 0's launcher and node 1's (1 minute at
// most), logs their stderr, checks that both ended cleanly and returns
// node 0's stdout and stderr.
func nodesEnded(t *testing.T, node0, node1 *nodeLauncher) (string, string) {
	t.Helper()
	waitNodes(t, []*nodeLauncher{node0, node1}, 60*time.Second)
	out, errOut := node0.stdout.String(), node0.stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's launcher:\n%s", errOut, node1.stderr.String())
	require.NoError(t, node0.err, out)
	require.NoError(t, node1.err, node1.stderr.String())
	return out, errOut
}

// requireNodeJoined checks a heal of node 1's two ranks into a job of 4
// ranks, none lost: they joined as ranks 2 and 3 under the names name and
// name+1, why saying so, and the members sent the state.
func requireNodeJoined(t *testing.T, h healRecord, name int, why, out string) {
	t.Helper()
	require.Equal(t, int64(0), h.StepsLost)
	require.Len(t, h.Joined, 2, out)
	for i, j := range h.Joined {
		require.Equal(t, 2+i, j.Rank)
		require.Equal(t, name+i, j.Name)
		require.Contains(t, j.Why, why)
		require.NotNil(t, j.Node)
		require.Equal(t, 1, *j.Node)
	}
	require.Len(t, h.SentBytes, 4)
	require.Greater(t, h.SentBytes[0], int64(0))
	require.Greater(t, h.SentBytes[1], int64(0))
}

// rejoinRun is a job run by rejoinJob.
type rejoinRun struct {
	out, errOut       string // node 0's
	back              *nodeLauncher
	epochs            []map[string]any
	h                 healRecord
	killed, restarted time.Time
}

// rejoinJob runs a 6-epoch job of nnodes node launchers with -heal (as
// startKillNodeEnv: every step at least 40 ms, nodeEnv, extra) whose node
// 1 is killed after step 5 and started again once node 0 has dropped it;
// it requires both launchers to end cleanly, one heal, no step lost, and
// every joined rank on node 1. Not under -race or -short.
func rejoinJob(t *testing.T, nnodes int, tr string, nodeEnv func(int) []string, extra ...string) rejoinRun {
	t.Helper()
	var r rejoinRun
	var nodes []*nodeLauncher
	nodes, r.killed = startKillNodeEnv(t, nnodes, tr, 1, 40, nodeEnv, append([]string{"-heal", "-epochs", "6"}, extra...)...)
	waitGone(t, nodes)
	r.back = restartLauncher(t, nodes[1])
	r.restarted = time.Now()
	waitNodes(t, append(slices.Delete(slices.Clone(nodes), 1, 2), r.back), 60*time.Second)
	r.out, r.errOut = nodes[0].stdout.String(), nodes[0].stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's restarted launcher:\n%s", r.errOut, r.back.stderr.String())
	require.NoError(t, nodes[0].err, r.out)
	for i, n := range nodes[2:] {
		require.NoError(t, n.err, "node %d: %s", 2+i, n.stderr.String())
	}
	require.NoError(t, r.back.err, r.back.stderr.String())
	r.epochs, r.h = requireHealedOnce(t, r.out, 6)
	require.Equal(t, int64(0), r.h.StepsLost)
	for _, j := range r.h.Joined {
		require.NotNil(t, j.Node)
		require.Equal(t, 1, *j.Node)
	}
	return r
}

// Node 1's launcher restarted with another run id: node 0 refuses it by
// name within seconds, and finishes on its own two ranks.
func TestSurviveNodeRejoinAnotherJob(t *testing.T) {
	errOut := rejoinRefused(t, []string{"-heal"},
		`launch: node 1: rejoining the running job: node 0 refused: its RINGDDP_RUN_ID is "another-job", but this job runs as "nodes-`,
		"RINGDDP_RUN_ID=another-job")
	require.Contains(t, errOut, "launch: node 0: refused node 1's launcher (pid")
}

// Node 1's launcher restarted with another secret: node 0's store refuses
// its handshake, and it ends at once saying so; node 0 finishes.
func TestSurviveNodeRejoinWrongSecret(t *testing.T) {
	rejoinRefused(t, []string{"-heal"}, "every node needs the same RINGDDP_SECRET", launch.EnvSecret+"=another secret of this test, 42")
}

// Node 1's launcher restarted, then lost again while its ranks heal (one
// of them kills the launcher as it connects; the ranks die with it): node
// 0's ranks abort the heal and continue on their own — no restart — and a
// third launcher for node 1 rejoins and heals, the job ending on 4 ranks.
func TestSurviveNodeDiesMidHeal(t *testing.T) {
	nodes, _ := startKillNodeSlow(t, "tcp", 1, 40, "-heal", "-epochs", "10")
	waitGone(t, nodes)
	second := restartLauncher(t, nodes[1], faultsVar+"=slow:0:40;nodekill:4:0")
	waitNodes(t, []*nodeLauncher{second}, 30*time.Second)
	require.Error(t, second.err, "killed")
	for strings.Count(nodes[0].stderr.String(), "the job continues without node 1") < 2 {
		select {
		case <-nodes[0].done:
			t.Fatalf("node 0 ended before it dropped node 1 again: %v\n%s", nodes[0].err, nodes[0].stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	third := restartLauncher(t, nodes[1])
	waitNodes(t, []*nodeLauncher{nodes[0], third}, 60*time.Second)
	out, errOut := nodes[0].stdout.String(), nodes[0].stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's second launcher:\n%s\nits third:\n%s", errOut, second.stderr.String(), third.stderr.String())
	require.NoError(t, nodes[0].err, out)
	require.NoError(t, third.err, third.stderr.String())
	epochs, restarts, _ := survivedOutput(t, out)
	require.Len(t, epochs, 10, out)
	require.Empty(t, restarts, out)
	requireEachSampleOnce(t, epochs, 24)
	hs := healedOutput(t, out)
	require.NotEmpty(t, hs, out)
	last := hs[len(hs)-1]
	require.Equal(t, []int{6, 7}, []int{last.Joined[0].Name, last.Joined[1].Name}, out)
	require.Equal(t, 4.0, epochs[9]["ranks"], out)
}
