package main

import (
	"strconv"
	"testing"

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
	r := rejoinJob(t, 2, "auto", twoHosts(40, 96))
	require.Len(t, r.h.Joined, 2, r.out)
	for i, j := range r.h.Joined {
		require.Equal(t, 2+i, j.Rank)
		require.Equal(t, 4+i, j.Name)
	}
	require.Equal(t, 4.0, r.epochs[5]["ranks"], r.out)
	first := shmMappings(t, r.errOut)
	rejoined := shmMappings(t, r.back.stderr.String())
	// A two-rank shm world maps 2 files a rank (one host of four: 4;
	// a host per rank: none).
	require.Equal(t, []int{2, 2}, first, "node 0's ranks at the last step")
	require.Equal(t, []int{2, 2}, rejoined, "node 1's rejoined ranks at the last step")
	require.Contains(t, r.errOut, "node 1 is back in the job with ranks 4, 5")
}
