package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A rank lost on a live node other than 0 is replaced by that node's
// launcher (nodes_replace.go in launch).

// replaceJob runs a 2 × 2 job with -heal in which rank 3 (node 1) is
// killed after step 7, node 1's launcher alive, with the faults extra
// besides; it requires both launchers to end cleanly, the job to end on
// the full world of 4 with no step lost and every example once per epoch,
// and returns the last heal and the launchers' stderr.
func replaceJob(t *testing.T, extra string) (h healRecord, errOut, errOut1 string) {
	t.Helper()
	nodes := nodeJob(t, "kill:3:7:0;slow:0:30"+extra, "-heal", "-epochs", "4")
	waitNodes(t, nodes, 60*time.Second)
	out := nodes[0].stdout.String()
	errOut, errOut1 = nodes[0].stderr.String(), nodes[1].stderr.String()
	t.Logf("node 0's stderr:\n%s\nnode 1's stderr:\n%s", errOut, errOut1)
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d", i)
	}
	epochs := requireNoStepLost(t, out, 4)
	require.Equal(t, 4.0, epochs[3]["ranks"], out)
	hs := healedOutput(t, out)
	require.NotEmpty(t, hs, out)
	h = hs[len(hs)-1]
	require.Equal(t, int64(0), h.StepsLost)
	require.Len(t, h.Joined, 1, out)
	require.Equal(t, 3, h.Joined[0].Rank)
	require.NotNil(t, h.Joined[0].Node)
	require.Equal(t, 1, *h.Joined[0].Node)
	require.NotContains(t, errOut, "left the job")
	return h, errOut, errOut1
}

// requireNoStepLost checks the stdout of a job of n epochs of batch 24
// that survived its failures: no restart, no completed step lost, every
// example once per epoch; it returns the epochs.
func requireNoStepLost(t *testing.T, out string, n int) []map[string]any {
	t.Helper()
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, n, out)
	require.Empty(t, restarts, out)
	for _, c := range survived {
		require.Equal(t, int64(0), c.StepsLost, out)
	}
	requireEachSampleOnce(t, epochs, 24)
	return epochs
}

// Rank 3 (node 1) killed: the other three continue as generation 1; node
// 0 asks node 1's launcher for a replacement, which starts rank 4 on node
// 1; it joins at a step boundary as rank 3 and heals from the three (the
// replicas compared bitwise), node 1's rank 2 and node 0's sending.
func TestSurviveNodeRankReplaced(t *testing.T) {
	h, errOut, errOut1 := replaceJob(t, "")
	j := h.Joined[0]
	require.Equal(t, 4, j.Name)
	require.Contains(t, j.Why, "replaces rank 3, which was killed by signal killed")
	require.Len(t, h.SentBytes, 4)
	require.Zero(t, h.SentBytes[3])
	for r := range 3 {
		require.Greater(t, h.SentBytes[r], int64(0), "rank %d's share", r)
	}
	require.Contains(t, errOut, "launch: node 0: asked node 1's launcher to start rank 4 in place of rank 3")
	require.Contains(t, errOut1, "launch: node 1: started rank 4 (pid ")
	require.NotNil(t, j.BackSeconds)
	t.Logf("rank 4 back %.3f s after node 0 asked for it; heal %.3f s (%d bytes of state), members paused %.3f s",
		*j.BackSeconds, h.HealSecs, h.StateBytes, h.Paused)
}

// A replacement that never heals: started with a wrong secret (the ranks'
// store refuses it at the handshake, it exits before it is taken in), or
// killed during its heal, 30 ms after it connected (the members abort the
// heal and go on without it, no restart). Either way node 0 asks node 1's
// launcher for another (rank 5), which heals.
func TestSurviveNodeReplacementBadCases(t *testing.T) {
	for _, c := range []struct{ name, fault, want string }{
		{"wrong secret", ";secret:4", "started to join, exited with status 1 before it was taken in"},
		{"dies mid-heal", ";joinkill:4:30000", "rank 4 (pid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, errOut, _ := replaceJob(t, c.fault)
			require.Equal(t, 5, h.Joined[0].Name)
			require.Contains(t, errOut, c.want)
			require.Contains(t, errOut, "launch: node 0: asked node 1's launcher to start rank 5 in place of rank 4")
		})
	}
}

// Node 1's launcher killed by the replacement it started, as that
// connects (its rank 2 and the replacement die with it): node 0 drops
// node 1 whole — its remaining member and the joiner — and finishes on its
// own two ranks, no step lost: nothing waits for the launcher that is
// gone.
func TestSurviveNodeLostWhileReplacing(t *testing.T) {
	nodes := nodeJob(t, "kill:3:7:0;slow:0:30;nodekill:4:0", "-heal", "-epochs", "4")
	out, errOut := node0Ended(t, nodes, 60*time.Second)
	t.Logf("node 0's stderr:\n%s\nnode 1's stderr:\n%s", errOut, nodes[1].stderr.String())
	epochs := requireNoStepLost(t, out, 4)
	require.Equal(t, 2.0, epochs[3]["ranks"], out)
	require.Contains(t, errOut, "launch: node 0: asked node 1's launcher to start rank 4 in place of rank 3")
	require.Contains(t, errOut, "the job continues without node 1")
}
