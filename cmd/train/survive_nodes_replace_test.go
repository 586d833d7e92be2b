package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A rank lost on a live node other than 0 is replaced by that node's
// launcher (nodes_replace.go in launch).

// Rank 3 (node 1) killed after step 7, with -heal, node 1's launcher
// alive: the other three continue as generation 1; node 0 asks node 1's
// launcher for a replacement, which starts rank 4 on node 1; it joins at a
// step boundary as rank 3 and heals from the three (the replicas compared
// bitwise). The job ends on the full world of 4, no step lost, every
// example once per epoch, and both launchers end cleanly.
func TestSurviveNodeRankReplaced(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node job of 4 ranks: not under -race or -short")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:3:7:0;slow:0:30")
	nodes := startNodes(t, 2, nodesSurvivorArgs(data, ck, "tcp", "-heal", "-epochs", "4")...)
	waitNodes(t, nodes, 60*time.Second)
	out, errOut, errOut1 := nodes[0].stdout.String(), nodes[0].stderr.String(), nodes[1].stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's stderr:\n%s", errOut, errOut1)
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d", i)
	}
	epochs, h := requireHealedOnce(t, out, 4)
	require.Equal(t, int64(0), h.StepsLost)
	require.Len(t, h.Joined, 1, out)
	j := h.Joined[0]
	require.Equal(t, 3, j.Rank)
	require.Equal(t, 4, j.Name)
	require.NotNil(t, j.Node)
	require.Equal(t, 1, *j.Node)
	require.Contains(t, j.Why, "replaces rank 3, which was killed by signal killed")
	require.Len(t, h.SentBytes, 4)
	require.Zero(t, h.SentBytes[3])
	require.Equal(t, 4.0, epochs[3]["ranks"], out)
	require.Contains(t, errOut, "launch: node 0: asked node 1's launcher to start rank 4 in place of rank 3")
	require.Contains(t, errOut1, "launch: node 1: started rank 4 (pid ")
	require.NotContains(t, errOut, "left the job")
}
