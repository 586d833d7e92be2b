package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/launch/selftest"
)

// Elastic jobs of several nodes, on one machine: each node's launcher is
// a process of its own (the test binary running the command, selftest),
// with -nnodes 2 -node-rank i and -master on loopback, as on two hosts;
// the checkpoint directory stands for storage every node shares.

// nodeLauncher is one node's launcher process.
type nodeLauncher struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// startNodes starts a launcher per node with args plus its -node-rank and
// a shared -master and secret.
func startNodes(t *testing.T, nnodes int, args ...string) []*nodeLauncher {
	t.Helper()
	return startNodesEnv(t, nnodes, nil, args...)
}

// startNodesEnv is startNodes with nodeEnv(i) (nil: none) added to node
// i's environment.
func startNodesEnv(t *testing.T, nnodes int, nodeEnv func(int) []string, args ...string) []*nodeLauncher {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	master := l.Addr().String()
	require.NoError(t, l.Close())
	nodes := make([]*nodeLauncher, nnodes)
	for i := range nodes {
		var env []string
		if nodeEnv != nil {
			env = nodeEnv(i)
		}
		nodes[i] = startNodeLauncher(t, append(append([]string(nil), args...), "-nnodes", strconv.Itoa(nnodes), "-node-rank", strconv.Itoa(i), "-master", master), env...)
	}
	return nodes
}

// startNodeLauncher starts one node's launcher with args (its -nnodes,
// -node-rank and -master among them), the tests' secret and env added
// to this process's environment.
func startNodeLauncher(t *testing.T, args []string, env ...string) *nodeLauncher {
	t.Helper()
	path, argv, renv, err := selftest.RankCommand(args)
	require.NoError(t, err)
	cmd := exec.Command(path, argv...)
	cmd.Env = append(os.Environ(), launch.EnvSecret+"=elastic nodes test secret")
	cmd.Env = append(append(cmd.Env, renv...), env...)
	return startLauncherCmd(t, cmd)
}

// startLauncherCmd starts cmd, a node's launcher, its output kept; the
// test's cleanup kills it.
func startLauncherCmd(t *testing.T, cmd *exec.Cmd) *nodeLauncher {
	t.Helper()
	n := &nodeLauncher{cmd: cmd, done: make(chan struct{})}
	n.cmd.Stdout, n.cmd.Stderr = &n.stdout, &n.stderr
	require.NoError(t, n.cmd.Start())
	go func() {
		n.err = n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
	})
	return n
}

// wait waits for every launcher to exit, at most d.
func waitNodes(t *testing.T, nodes []*nodeLauncher, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for i, n := range nodes {
		select {
		case <-n.done:
		case <-deadline:
			t.Fatalf("node %d's launcher still running after %v\nstderr:\n%s", i, d, n.stderr.String())
		}
	}
}

// A rank of node 1 killed with SIGKILL mid-epoch: node 1's launcher tells
// node 0's, both stop and restart together from node 0's choice of
// checkpoint, and finish; the final parameters and optimizer state are
// bitwise those of an uninterrupted run resumed from that checkpoint.
func TestElasticNodesRankKilled(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	common := []string{"-data", data, "-batch", "20", "-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "sgd"}
	t.Setenv(faultsVar, "kill:1:13:0")
	nodes := startNodes(t, 2, append([]string{"-transport", "tcp", "-ranks", "1", "-checkpoint", ck,
		"-checkpoint-every", "5", "-checkpoint-keep", "100", "-max-restarts", "2"}, common...)...)
	waitNodes(t, nodes, time.Minute)
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d\nstdout:\n%s\nstderr:\n%s", i, n.stdout.String(), n.stderr.String())
	}
	out := nodes[0].stdout.String()
	t.Logf("node 0's stdout:\n%s\nnode 0's stderr:\n%s\nnode 1's stderr:\n%s", out, nodes[0].stderr.String(), nodes[1].stderr.String())
	epochs, restarts := jobOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Len(t, restarts, 1, out)
	r := restarts[0]
	require.Equal(t, 1, r.FailedRank)
	require.NotNil(t, r.FailedNode)
	require.Equal(t, 1, *r.FailedNode)
	require.Equal(t, "was killed by signal killed", r.Reason)
	require.Contains(t, []int64{12, 13}, r.FailedAtStep)
	require.Equal(t, 2, r.PreviousRanks)
	require.Equal(t, 2, r.Ranks)
	require.Equal(t, 2, r.PreviousNodes)
	require.Equal(t, 2, r.Nodes)
	require.Empty(t, r.DroppedNodes)
	from := filepath.Join(dir, "ck.step10.safetensors")
	require.Equal(t, from, r.Checkpoint)
	require.Equal(t, int64(10), r.ResumedFromStep)
	require.NotNil(t, r.TrainingAgainSeconds)
	require.Equal(t, 40.0, epochs[1]["global_step"])
	require.Contains(t, nodes[1].stderr.String(), "launch: node 1: restart 1 (node 0's plan) from step 10 on 2 ranks, 2 nodes")

	t.Setenv(faultsVar, "")
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	_, err := runTrain(t, append([]string{"-ranks", "2", "-resume", from, "-checkpoint", ref}, common...)...)
	require.NoError(t, err)
	require.Equal(t, dataSHA(t, ref), dataSHA(t, ck), "final parameters and optimizer state")
}

// Node 1's launcher killed for good (SIGKILL; its rank dies with it): node
// 0 drops it after -rejoin-timeout and finishes alone when -min-ranks
// allows, as an uninterrupted 1-rank run resumed from the same checkpoint
// does; with the default minimum (every rank) it fails, saying why.
func TestElasticNodeLauncherKilled(t *testing.T) {
	data := writeMNISTDir(t)
	for _, minRanks := range []string{"1", ""} {
		t.Run("min_ranks="+minRanks, func(t *testing.T) {
			dir := t.TempDir()
			ck := filepath.Join(dir, "ck.safetensors")
			common := []string{"-data", data, "-batch", "20", "-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "sgd"}
			t.Setenv(faultsVar, "slow:0:50") // 40 steps of at least 50 ms
			args := append([]string{"-transport", "tcp", "-ranks", "1", "-checkpoint", ck, "-checkpoint-every", "5",
				"-checkpoint-keep", "100", "-max-restarts", "2", "-rejoin-timeout", "1s"}, common...)
			if minRanks != "" {
				args = append(args, "-min-ranks", minRanks)
			}
			nodes := startNodes(t, 2, args...)
			deadline := time.Now().Add(time.Minute)
			for {
				if _, err := os.Stat(filepath.Join(dir, "ck.step10.safetensors")); err == nil {
					break
				}
				select {
				case <-nodes[0].done:
					t.Fatalf("node 0's launcher ended before step 10: %v\n%s", nodes[0].err, nodes[0].stderr.String())
				default:
				}
				require.True(t, time.Now().Before(deadline), "no checkpoint at step 10 after a minute:\n%s", nodes[0].stderr.String())
				time.Sleep(10 * time.Millisecond)
			}
			require.NoError(t, nodes[1].cmd.Process.Signal(syscall.SIGKILL))
			waitNodes(t, nodes, time.Minute)
			out, errOut := nodes[0].stdout.String(), nodes[0].stderr.String()
			t.Logf("node 0's stdout:\n%s\nnode 0's stderr:\n%s\nnode 1's stderr:\n%s", out, errOut, nodes[1].stderr.String())
			if minRanks == "" {
				require.Error(t, nodes[0].err, out)
				require.Contains(t, errOut, "node 1 dropped (its launcher did not come back within 1s)")
				require.Contains(t, errOut, "fewer than the minimum of 2 (-min-ranks)")
				return
			}
			require.NoError(t, nodes[0].err, "stdout:\n%s\nstderr:\n%s", out, errOut)
			epochs, restarts := jobOutput(t, out)
			require.Len(t, epochs, 2, out)
			require.Len(t, restarts, 1, out)
			r := restarts[0]
			require.NotNil(t, r.FailedNode)
			require.Equal(t, 1, *r.FailedNode)
			require.Equal(t, 1, r.FailedRank)
			require.Contains(t, r.Reason, "node 1 (")
			require.Contains(t, r.Reason, "was lost with its rank 1")
			require.Equal(t, 1, r.Ranks)
			require.Equal(t, 1, r.Nodes)
			require.Equal(t, []droppedNode{{Node: 1, Reason: "its launcher did not come back within 1s"}}, r.DroppedNodes)
			require.GreaterOrEqual(t, r.ResumedFromStep, int64(10))
			require.Equal(t, 1.0, epochs[1]["ranks"])
			require.Equal(t, 20.0, epochs[1]["global_batch"])

			t.Setenv(faultsVar, "")
			ref := filepath.Join(t.TempDir(), "ref.safetensors")
			_, err := runTrain(t, append([]string{"-ranks", "1", "-resume", r.Checkpoint, "-checkpoint", ref}, common...)...)
			require.NoError(t, err)
			require.Equal(t, dataSHA(t, ref), dataSHA(t, ck), "final parameters and optimizer state")
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writers and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
