package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Survivors continue across node launchers: 2 nodes × 2 ranks on
// loopback (-nnodes 2), -on-failure continue.

// nodesSurvivorArgs are the arguments of a 2 × 2 job that continues.
func nodesSurvivorArgs(data, ck, tr string, extra ...string) []string {
	args := []string{"-transport", tr, "-ranks", "2", "-on-failure", "continue", "-data", data, "-batch", "24",
		"-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "adam", "-checkpoint", ck}
	return append(args, extra...)
}

// A rank of node 1 (rank 3) killed after step 7: node 1's launcher
// reports its exit to node 0's, the other three continue as generation 1
// and finish; nothing is lost, each example is used once per epoch, node
// 1's launcher ends cleanly with its remaining rank.
func TestSurviveNodesRankKilled(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node job of 4 ranks: not under -race or -short")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:3:7:0")
	nodes := startNodes(t, 2, nodesSurvivorArgs(data, ck, "tcp")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node 1's stderr:\n%s", nodes[1].stderr.String())
		}
	})
	waitNodes(t, nodes, 20*time.Second)
	out := nodes[0].stdout.String()
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d\nstdout:\n%s\nstderr:\n%s", i, n.stdout.String(), n.stderr.String())
	}
	t.Logf("node 0's stderr:\n%s\nnode 1's stderr:\n%s", nodes[0].stderr.String(), nodes[1].stderr.String())
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 1, out)
	c := survived[0]
	require.Equal(t, 3, c.FailedRank)
	require.Equal(t, "was killed by signal killed on node 1", c.Reason[:len("was killed by signal killed on node 1")])
	require.Equal(t, 3, c.Ranks)
	require.Equal(t, int64(0), c.StepsLost)
	requireEachSampleOnce(t, epochs, 24)
}
