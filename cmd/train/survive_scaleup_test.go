package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
)

// Scaling up (-nnodes MIN:MAX; launch's nodes_scaleup.go): a job started
// on node 0 alone (2 ranks, -nnodes 1:2) that node 1 joins while it
// runs. Real tcp jobs of several seconds: skipped under -race and
// -short, as the other node launcher tests are.

// scaleUpJob starts node 0 of a 1:2 job of 2 ranks a node (global batch
// 24, every step of rank 0 at least 40 ms, a checkpoint every 5 steps)
// and waits until it has checkpointed step 5; it returns node 0, the
// master address and the arguments every node of the job gets (without
// -nnodes, -node-rank and -master). Over transport tr, node 0's launcher
// gets env added.
func scaleUpJob(t *testing.T, epochs, tr string, env ...string) (*nodeLauncher, string, []string) {
	return scaleUpJobArgs(t, epochs, tr, nil, env...)
}

// scaleUpJobArgs is scaleUpJob with extra arguments for every node.
func scaleUpJobArgs(t *testing.T, epochs, tr string, extra []string, env ...string) (*nodeLauncher, string, []string) {
	t.Helper()
	data := writeMNISTDir(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	t.Setenv(faultsVar, "slow:0:40")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	master := l.Addr().String()
	require.NoError(t, l.Close())
	// -last-call 0: node 0 starts alone at once, and node 1 joins the
	// running job (with a last call it would wait for node 1 first).
	args := nodesSurvivorArgs(data, ck, tr, append([]string{"-heal", "-epochs", epochs, "-checkpoint-every", "5", "-checkpoint-keep", "100", "-last-call", "0"}, extra...)...)
	node0 := startScaleNode(t, args, master, "1:2", 0, env...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node 0's stderr:\n%s", node0.stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ck.step5.safetensors")); err == nil {
			break
		}
		select {
		case <-node0.done:
			t.Fatalf("node 0's launcher ended before step 5: %v", node0.err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "no checkpoint at step 5 after 30 s")
		time.Sleep(5 * time.Millisecond)
	}
	return node0, master, args
}

// startScaleNode starts the launcher of node (-node-rank) with args,
// -nnodes nnodes and -master master, env added.
func startScaleNode(t *testing.T, args []string, master, nnodes string, node int, env ...string) *nodeLauncher {
	t.Helper()
	a := append(append([]string(nil), args...), "-nnodes", nnodes, "-node-rank", strconv.Itoa(node), "-master", master)
	return startNodeLauncher(t, a, env...)
}

// waitStderr waits until n's stderr holds line, failing if n ends first.
func waitStderr(t *testing.T, n *nodeLauncher, line string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for strings.Count(n.stderr.String(), line) == 0 {
		select {
		case <-n.done:
			t.Fatalf("the launcher ended before it said %q: %v\n%s", line, n.err, n.stderr.String())
		case <-deadline:
			t.Fatalf("the launcher did not say %q within 60 s:\n%s", line, n.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// refusedWithin starts a launcher that node 0 must refuse and checks that
// it ends within 10 s, its last line holding want.
func refusedWithin(t *testing.T, args []string, master, nnodes string, node int, want string) {
	t.Helper()
	began := time.Now()
	n := startScaleNode(t, args, master, nnodes, node)
	waitNodes(t, []*nodeLauncher{n}, 10*time.Second)
	took := time.Since(began)
	t.Logf("-nnodes %s -node-rank %d, refused after %v:\n%s", nnodes, node, took, n.stderr.String())
	require.Error(t, n.err)
	require.Contains(t, n.stderr.String(), want)
	require.Less(t, took, 10*time.Second)
}

// grownOutput checks node 0's -json output out of a job that grew: n
// epochs, no restart, every example used once per epoch (batch 24); it
// returns the epochs and the heals.
func grownOutput(t *testing.T, out string, n int) ([]map[string]any, []healRecord) {
	t.Helper()
	epochs, restarts, _ := survivedOutput(t, out)
	require.Len(t, epochs, n, out)
	require.Empty(t, restarts, out)
	requireEachSampleOnce(t, epochs, 24)
	return epochs, healedOutput(t, out)
}

// Node 1 started while the job trains on node 0 alone (-nnodes 1:2): node
// 0 admits it, its two ranks join as ranks 2 and 3 (names 2, 3: no
// member's), heal from node 0's ranks and the group grows past its
// starting world to 4 at a step boundary; the job ends on 4 ranks with no
// completed step lost and every example used once per epoch (the global
// batch of 24 kept, split 6 a rank). Meanwhile a second launcher given
// -node-rank 1 and one given -node-rank 2 (beyond MAX) are refused by
// name within seconds, and the job goes on undisturbed.
func TestScaleUpNodeJoins(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node tcp job of several seconds: not under -race or -short")
	}
	node0, master, args := scaleUpJob(t, "8", "tcp")
	joined := time.Now()
	node1 := startScaleNode(t, args, master, "1:2", 1)
	waitStderr(t, node0, "launch: node 0: node 1 is in the job now with ranks 2, 3 (scale up)")
	in := time.Since(joined)
	refusedWithin(t, args, master, "1:2", 1,
		"joining the running job: node 0 refused: node 1 is in the job already (its launcher joined it while the job ran): were two launchers given -node-rank 1?")
	refusedWithin(t, args, master, "1:3", 2,
		"node 0 refused: node 2 is beyond this job's -nnodes 1:2: it takes at most 2 nodes, -node-rank 0..1")
	out, errOut := nodesEnded(t, node0, node1)
	epochs, hs := grownOutput(t, out, 8)
	require.Len(t, hs, 1, out)
	h := hs[0]
	requireNodeJoined(t, h, 2, "node 1 joins the running job (scale up, -nnodes 1:2)", out)
	require.Equal(t, int64(0), h.SentBytes[2]+h.SentBytes[3])
	require.Greater(t, h.AtStep, int64(5), "node 1 started after step 5") // the group grew mid-run
	require.Equal(t, 4.0, epochs[7]["ranks"], out)
	require.Contains(t, errOut, "joins the running job (scale up): its ranks join as ranks 2, 3")
	t.Logf("node 1 in the job %.2f s after its launcher started; heal %.3f s (%d bytes of state, sent %v), members paused %.3f s",
		in.Seconds(), h.HealSecs, h.StateBytes, h.SentBytes, h.Paused)
}

// Node 1 joins, and its launcher is killed as its ranks heal (rank 2
// kills it once connected; the ranks die with it): node 0's ranks abort
// the heal and go on by themselves, with no restart; a launcher started
// for node 1 again is admitted (the first never was taken in) and the job
// ends on 4 ranks, every example once per epoch.
func TestScaleUpNodeDiesMidHeal(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node tcp job of several seconds: not under -race or -short")
	}
	node0, master, args := scaleUpJob(t, "10", "tcp")
	first := startScaleNode(t, args, master, "1:2", 1, faultsVar+"=slow:0:40;nodekill:2:0")
	waitNodes(t, []*nodeLauncher{first}, 30*time.Second)
	t.Logf("node 1's first launcher:\n%s", first.stderr.String())
	require.Error(t, first.err, "killed")
	waitStderr(t, node0, "the job continues without node 1")
	second := startScaleNode(t, args, master, "1:2", 1)
	out, _ := nodesEnded(t, node0, second)
	epochs, hs := grownOutput(t, out, 10)
	require.NotEmpty(t, hs, out)
	requireNodeJoined(t, hs[len(hs)-1], 4, "node 1 joins the running job", out)
	require.Equal(t, 4.0, epochs[9]["ranks"], out)
}

// -nnodes MIN:MAX misused: each refused at once, naming what is wrong.
func TestScaleUpFlagErrors(t *testing.T) {
	tcp := []string{"-transport", "tcp", "-ranks", "2", "-master", "127.0.0.1:1", "-insecure"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-nnodes", "3:2"}, "3:2: MIN (the nodes the job starts with) is more than MAX"},
		{[]string{"-nnodes", "1:x"}, `MAX "x": want a number of nodes`},
		{[]string{"-nnodes", "0:2"}, `MIN "0": want a number of nodes`},
		{[]string{"-nnodes", "1:2", "-node-rank", "2"}, "-node-rank 2: out of range for -nnodes 1:2 (valid: 0..1)"},
		{[]string{"-nnodes", "1:2"}, "-nnodes 1:2 lets nodes join the running job, which needs -on-failure continue -heal"},
		{[]string{"-nnodes", "1:2", "-on-failure", "continue"}, "needs -on-failure continue -heal"},
		{[]string{"-nnodes", "1:2", "-on-failure", "continue", "-heal", "-zero1", "-zero-buddies=false"}, "-heal and -spares with -zero1 need -zero-buddies"},
		{[]string{"-nnodes", "1:2", "-ranks", "1", "-on-failure", "continue", "-heal", "-zero1"}, "-nnodes 1:2 with -zero1 starts a ZeRO-1 group of one rank, which keeps no buddy copy"},
		{[]string{"-nnodes", "1:2", "-on-failure", "continue", "-spares", "1"}, "-nnodes 1:2 with -spares: a spare would run on node 0"},
		{[]string{"-nnodes", "1:2", "-on-failure", "continue", "-heal", "-last-call", "-1s"}, "-last-call -1s: must not be negative"},
		{[]string{"-nnodes", "2", "-last-call", "5s"}, "-last-call 5s applies to -nnodes MIN:MAX (MIN < MAX) only"},
		{[]string{"-nnodes", "2:2", "-last-call", "0s"}, "-last-call 0s applies to -nnodes MIN:MAX (MIN < MAX) only"},
	} {
		_, err := runTrain(t, append(slices.Clone(tcp), c.args...)...)
		require.ErrorContains(t, err, c.want, "args %q", c.args)
	}
	_, err := runTrain(t, "-transport", "shm", "-ranks", "2", "-master", "127.0.0.1:1", "-insecure", "-nnodes", "1:2", "-on-failure", "continue", "-heal")
	require.ErrorContains(t, err, "use -transport tcp or auto across hosts")
}

// Over -transport auto, node 1 (its own host: RINGDDP_NODE) joins a job
// running on node 0's two ranks (-nnodes 1:2): its ranks are placed on
// node 1 in the grown generation's plan, so each rank maps the shm files
// of a two-rank shm world at the last step (2 files) — not those of one
// host of four (4) nor none (a host per rank, all tcp). The job ends on 4
// ranks with no completed step lost, every example once per epoch.
func TestScaleUpNodeJoinsAuto(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node job of several seconds: not under -race or -short")
	}
	hosts := twoHosts(40, 128) // 8 epochs of 16 steps: the last is 128
	node0, master, args := scaleUpJob(t, "8", "auto", hosts(0)...)
	node1 := startScaleNode(t, args, master, "1:2", 1, hosts(1)...)
	waitStderr(t, node0, "launch: node 0: node 1 is in the job now with ranks 2, 3 (scale up)")
	out, errOut := nodesEnded(t, node0, node1)
	epochs, hs := grownOutput(t, out, 8)
	require.Len(t, hs, 1, out)
	requireNodeJoined(t, hs[0], 2, "node 1 joins the running job (scale up, -nnodes 1:2)", out)
	require.Equal(t, int64(0), hs[0].StepsLost, out)
	require.Equal(t, 4.0, epochs[7]["ranks"], out)
	require.Equal(t, []int{2, 2}, shmMappings(t, errOut), "node 0's ranks at the last step")
	require.Equal(t, []int{2, 2}, shmMappings(t, node1.stderr.String()), "node 1's ranks at the last step")
}

// Under -zero1 (buddies on, as -on-failure continue has them), node 1
// joins a job running on node 0's two ranks: the group grows past its
// starting world from 2 to 4, the new ranks heal and the optimizer state
// is re-sharded over 4 (the heal's report gives the re-shard's bytes).
// The job ends on 4 ranks, no completed step lost, every example once per
// epoch, and its final parameters within 1e-3 (largest difference) of a
// failure-free ZeRO-1 run on 2 ranks: not bitwise, as the grown steps
// split the global batch 6+6+6+6 instead of 12+12 and the sums round
// differently (TestSurviveHealZeRO1 gives the bound's reasoning: a lost
// shard ends about 3e-2 away).
func TestScaleUpNodeJoinsZero1(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node tcp job of several seconds: not under -race or -short")
	}
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	refOut, err := runTrain(t, nodesSurvivorArgs(writeMNISTDir(t), ref, "tcp", "-zero1", "-epochs", "8")...)
	require.NoError(t, err, refOut)
	node0, master, args := scaleUpJobArgs(t, "8", "tcp", []string{"-zero1"})
	node1 := startScaleNode(t, args, master, "1:2", 1)
	waitStderr(t, node0, "launch: node 0: node 1 is in the job now with ranks 2, 3 (scale up)")
	out, _ := nodesEnded(t, node0, node1)
	epochs, hs := grownOutput(t, out, 8)
	require.Len(t, hs, 1, out)
	h := hs[0]
	requireNodeJoined(t, h, 2, "node 1 joins the running job (scale up, -nnodes 1:2)", out)
	require.Equal(t, 4.0, epochs[7]["ranks"], out)
	require.Len(t, h.ReshardSentBytes, 4, out)
	require.Zero(t, h.ReshardSentBytes[2]+h.ReshardSentBytes[3], "the joiners held no shard to send")
	require.Positive(t, h.ReshardBytes, out)
	diff := paramDiff(t, ref, args[slices.Index(args, "-checkpoint")+1])
	t.Logf("grown at step %d: re-shard %d bytes (sent %v); largest parameter difference from the failure-free run: %g",
		h.AtStep, h.ReshardBytes, h.ReshardSentBytes, diff)
	require.Less(t, diff, 1e-3)
}

// -last-call's value as the launcher gets it: the default ignored without
// a range, a value given to a rank ignored (a restart's ranks run with
// -nnodes N appended), zero kept.
func TestLastCallFlag(t *testing.T) {
	grows := &launch.Transport{MP: &launch.Setup{Launcher: true, Flags: launch.Flags{Nnodes: 1, MaxNodes: 2}}}
	fixed := &launch.Transport{MP: &launch.Setup{Launcher: true, Flags: launch.Flags{Nnodes: 2}}}
	rank := &launch.Transport{MP: &launch.Setup{Flags: launch.Flags{Nnodes: 2}}}
	for _, c := range []struct {
		tr    *launch.Transport
		d     time.Duration
		given bool
		want  time.Duration
	}{
		{grows, launch.DefaultLastCall, false, launch.DefaultLastCall},
		{grows, 3 * time.Second, true, 3 * time.Second},
		{grows, 0, true, 0},
		{fixed, launch.DefaultLastCall, false, 0},
		{rank, 3 * time.Second, true, 0},
		{&launch.Transport{}, launch.DefaultLastCall, false, 0}, // in process
	} {
		got, err := lastCallFlag(c.tr, c.d, c.given)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%+v", c)
	}
}

// The last call (-nnodes 2:3 -last-call 3s; launch's nodes_lastcall.go):
// node 2 is started once node 0 waits for it, nodes 0 and 1 being in. It
// is in the job's first generation — 6 ranks from the first step, no heal,
// no restart, no failure survived, every example once per epoch (the
// global batch of 24 split 4 a rank) — and, all MAX nodes being in, the
// window closes at once rather than after its 3 s. Under DDP and under
// ZeRO-1 (6 shards from the start, buddies on). 3-node tcp jobs of a
// second or two each: skipped under -race and -short.
func TestLastCallNodeInFirstGeneration(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("3-node tcp jobs of several seconds: not under -race or -short")
	}
	for name, extra := range map[string][]string{"ddp": nil, "zero1": {"-zero1"}} {
		t.Run(name, func(t *testing.T) { lastCallFirstGeneration(t, extra) })
	}
}

// lastCallFirstGeneration is TestLastCallNodeInFirstGeneration's job,
// with extra arguments for every node.
func lastCallFirstGeneration(t *testing.T, extra []string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	master := l.Addr().String()
	require.NoError(t, l.Close())
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	args := nodesSurvivorArgs(writeMNISTDir(t), ck, "tcp", append([]string{"-heal", "-last-call", "3s"}, extra...)...)
	node0 := startScaleNode(t, args, master, "2:3", 0)
	node1 := startScaleNode(t, args, master, "2:3", 1)
	waitStderr(t, node0, "last call for node 2: the job starts in 3s, or once they are all in (-last-call)")
	opened := time.Now()
	node2 := startScaleNode(t, args, master, "2:3", 2)
	waitStderr(t, node0, "node 2 joined in the last call")
	joined := time.Since(opened)
	waitStderr(t, node0, "(all are in): the job starts on 3 nodes")
	closed := time.Since(opened)
	waitNodes(t, []*nodeLauncher{node2}, 60*time.Second)
	t.Logf("node 2's launcher:\n%s", node2.stderr.String())
	require.NoError(t, node2.err)
	out, errOut := nodesEnded(t, node0, node1)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Empty(t, survived, out)
	require.Empty(t, healedOutput(t, out), out)
	requireEachSampleOnce(t, epochs, 24)
	require.Equal(t, 6.0, epochs[0]["ranks"], out)
	require.Equal(t, 6.0, epochs[1]["ranks"], out)
	require.NotContains(t, errOut, "scale up")
	require.Contains(t, node2.stderr.String(), "node 0's last call took node 2 into the job's first attempt, on 3 nodes")
	require.Less(t, closed, 3*time.Second, "the window closed after its full length, though all nodes were in")
	t.Logf("node 2 joined %.2f s and the last call closed %.2f s after node 2's launcher was started (its window: 3 s; between, node 0's check of the nodes' heartbeats)",
		joined.Seconds(), closed.Seconds())
}
