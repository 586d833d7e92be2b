package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Healing across node launchers over -transport auto: two node launchers
// on loopback given different RINGDDP_NODE names count as two hosts, so
// auto dials shm between a node's two ranks and tcp between the nodes.

// twoHosts is the environment of node i as its own host, every rank
// saying after global step maps how many shm files it maps.
func twoHosts(slowMs, maps int) func(int) []string {
	return func(i int) []string {
		return []string{"RINGDDP_NODE=test-host-" + string(rune('a'+i)), faultsVar + "=slow:0:" + strconv.Itoa(slowMs) + ";shmmaps:" + strconv.Itoa(maps)}
	}
}

// Node 1's launcher killed with its ranks, with -heal over auto: the job
// continues on node 0's two ranks; node 1's launcher, restarted, rejoins,
// and its ranks (4 and 5) heal from node 0's (the replicas compared
// bitwise) at a step boundary. The grown generation is again two hosts of
// two ranks: every rank maps the shm files of a two-rank shm world at the
// last step — not those of one host of four (the rejoined node's ranks
// placed with node 0's) nor none (a host per rank). No completed step is lost.
func TestSurviveNodeRejoinsAuto(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node job of 4 ranks, run twice over: not under -race or -short")
	}
	nodes, _ := startKillNodeEnv(t, 2, "auto", 1, 40, twoHosts(40, 96), "-heal", "-epochs", "6")
	waitGone(t, nodes)
	back := restartLauncher(t, nodes[1])
	waitNodes(t, []*nodeLauncher{nodes[0], back}, 60*time.Second)
	out, errOut := nodes[0].stdout.String(), nodes[0].stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's restarted launcher:\n%s", errOut, back.stderr.String())
	require.NoError(t, nodes[0].err, out)
	require.NoError(t, back.err, back.stderr.String())
	epochs, h := requireHealedOnce(t, out, 6)
	require.Equal(t, int64(0), h.StepsLost)
	require.Len(t, h.Joined, 2, out)
	for i, j := range h.Joined {
		require.Equal(t, 2+i, j.Rank)
		require.Equal(t, 4+i, j.Name)
		require.NotNil(t, j.Node)
		require.Equal(t, 1, *j.Node)
	}
	require.Equal(t, 4.0, epochs[5]["ranks"], out)
	first := shmMappings(t, errOut)
	rejoined := shmMappings(t, back.stderr.String())
	require.Len(t, first, 2, "node 0's ranks at the last step\n%s", errOut)
	require.Len(t, rejoined, 2, "node 1's rejoined ranks at the last step\n%s", back.stderr.String())
	// A two-rank shm world maps 2 files a rank (one host of four: 4;
	// a host per rank: none).
	require.Equal(t, []int{2, 2}, first, "node 0's ranks at the last step")
	require.Equal(t, []int{2, 2}, rejoined, "node 1's rejoined ranks at the last step")
	require.Contains(t, errOut, "node 1 is back in the job with ranks 4, 5")
}
