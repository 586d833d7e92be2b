package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Three node launchers of two ranks each under -zero1: rank 3 (node 1)
// killed after step 5 leaves nodes of 2, 1 and 2 ranks, whose buddies
// (zero.NodesOffset: offset 2 of 5) are all on another node than their
// rank; node 2's two ranks then lost together after step 12 take no shard
// with its only copy, so the job continues on ranks 0, 1 and 2 without a
// restart (with the ring neighbour as buddy, rank 4's copy was on rank 5:
// a restart). Two survived failures, no completed step lost, every
// example used once per epoch.
func TestSurviveUnevenNodesLostZeRO1(t *testing.T) {
	nodes, _ := nodeJobEnv(t, 3, "tcp", "kill:3:5:0;kill:4:12:0;kill:5:12:0", nil, "-zero1")
	out, errOut := node0Ended(t, nodes, 60*time.Second)
	require.NotContains(t, errOut, "falling back to a restart")
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.NotEmpty(t, survived, out)
	for _, c := range survived {
		require.Equal(t, int64(0), c.StepsLost, out)
	}
	require.Equal(t, 3, survived[len(survived)-1].Ranks, out)
	require.Equal(t, 3.0, epochs[1]["ranks"], out)
	requireEachSampleOnce(t, epochs, 24)
}
