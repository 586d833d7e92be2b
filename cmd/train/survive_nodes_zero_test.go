package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Healing across node launchers under ZeRO-1 with buddies.

// Three node launchers of one rank each under -zero1 (buddies: rank 1's
// shard has its copy on rank 2, another node), node 1's launcher killed
// with its rank: the job continues on ranks 0 and 2, which rebuild rank
// 1's shard from its buddy copy; node 1's launcher, restarted, rejoins,
// and its rank (named 3) joins at a step boundary: the state is
// re-sharded over the three, the joiner receives the parameters (the
// replicas compared bitwise) and its shard and buddy copy (each segment
// SHA-256 checked). No completed step is lost, every example is used once
// per epoch, and the job ends on the three ranks.
//
// One rank a node: with two, a node's loss takes a shard and its buddy
// copy together (the buddy is the ring neighbour, on the same node), and
// the job falls back to its checkpoint (TestSurviveNodeLostZeRO1).
func TestSurviveNodeRejoinsZeRO1(t *testing.T) {
	r := rejoinJob(t, 3, "tcp", nil, "-zero1", "-ranks", "1")
	h := r.h
	require.Len(t, h.Joined, 1, r.out)
	require.Equal(t, 2, h.Joined[0].Rank)
	require.Equal(t, 3, h.Joined[0].Name)
	require.Len(t, h.SentBytes, 3)
	require.Greater(t, h.SentBytes[0], int64(0))
	require.Greater(t, h.SentBytes[1], int64(0))
	require.Zero(t, h.SentBytes[2])
	require.Equal(t, 3.0, r.epochs[5]["ranks"], r.out)
	require.Contains(t, r.errOut, "launch: node 0: node 1 is back in the job with rank 3")
}

// Two ranks a node under -zero1 -heal, node 1 lost whole: ranks 2 and 3
// go together, and rank 2's shard had its only copy on rank 3, so the job
// cannot continue: the plan falls back to a restart (none allowed here:
// the job ends within seconds), saying which shard was lost — no hang, no
// diverged replicas.
func TestSurviveNodeLostZeRO1(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a 2-node job of 4 ranks: not under -race or -short")
	}
	nodes, killed := startKillNode(t, "tcp", 1, "-zero1", "-heal")
	waitNodes(t, nodes[:1], 20*time.Second)
	errOut := nodes[0].stderr.String()
	t.Logf("node 0 ended %v after node 1 was killed:\n%s", time.Since(killed), errOut)
	require.Error(t, nodes[0].err)
	require.Contains(t, errOut, "falling back to a restart")
	require.Contains(t, errOut, "rank 2's ZeRO-1 optimizer shard had its only copy on rank 3 (-zero-buddies): falling back to a restart")
}
