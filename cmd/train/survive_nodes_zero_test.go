package main

import (
	"fmt"
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
// One rank a node (buddies on the ring neighbour, the next node); with
// two, buddies go to the next node (TestSurviveNodeLostZeRO1).
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

// Two ranks a node under -zero1, node 1 lost whole (ranks 2 and 3 go
// together): buddies are on the next node (rank r's copy on rank r+2), so
// ranks 0 and 1 hold the copies of ranks 2's and 3's shards, rebuild them
// and continue on node 0 without a restart: no completed step lost, every
// example used once per epoch.
func TestSurviveNodeLostZeRO1(t *testing.T) {
	nodes, _ := startKillNode(t, "tcp", 1, "-zero1")
	out, errOut := node0Ended(t, nodes, 30*time.Second)
	c := oneSurvived(t, out, 2)
	require.Len(t, c.Removed, 2, out)
	require.NotContains(t, errOut, "falling back to a restart")
	requireReshardParts(t, c)
}

// Two ranks a node under -zero1, rank 1 and its buddy on the next node,
// rank 3, killed at once: rank 1's shard had its only copy on rank 3, so
// the job cannot continue: the plan falls back to a restart (none allowed
// here: the job ends within seconds), saying which shard was lost — no
// hang, no diverged replicas.
func TestSurviveNodeBuddiesLostZeRO1(t *testing.T) {
	nodes := nodeJob(t, "kill:1:7:0;kill:3:7:0", "-zero1")
	waitNodes(t, nodes[:1], 30*time.Second)
	errOut := nodes[0].stderr.String()
	require.Error(t, nodes[0].err, errOut)
	require.Contains(t, errOut, "ranks 1 and 3, a rank and its buddy 2 ranks on, were both lost: rank 1's ZeRO-1 optimizer shard had its only copy on rank 3 (-zero-buddies): falling back to a restart", errOut)
}

// ringBuddies is the buddy offset on one host: every rank's copy on its
// ring neighbour.
func ringBuddies([]int) int { return 1 }

// The launcher's judgement (Elastic.Survives) asks whether a rank and its
// buddy were both lost: with buddies on the ring neighbour a node of two
// ranks takes a shard and its only copy; with buddies placed by the
// generation's nodes (generationOffset: zero.NodesOffset; 3 nodes of 2,
// the next node) a whole node's loss keeps every shard, and a rank lost
// with the same local rank of the next node does not; on uneven nodes too
// (1, 2 and 2 ranks: offset 2), and with a joiner (rank 6, healed on node
// 1 in rank 2's place, last in the generation's order). Members are
// job-wide names in the generation's order (a generation that lost rank
// 1 earlier), on node name/2 unless given.
func TestBuddiesKeptJudgement(t *testing.T) {
	nodes := generationOffset(true)
	for _, c := range []struct {
		offset  func([]int) int
		members []int
		lost    []int
		want    string
		on      []int // the members' nodes; nil: name/2
	}{
		{ringBuddies, []int{0, 1, 2, 3}, []int{2, 3}, "ranks 2 and 3, ring neighbours, were both lost: rank 2's ZeRO-1 optimizer shard had its only copy on rank 3", nil},
		{ringBuddies, []int{0, 1, 2, 3}, []int{3, 0}, "ranks 3 and 0, ring neighbours", nil},
		{ringBuddies, []int{0, 1, 2, 3}, []int{1, 3}, "", nil},
		{ringBuddies, []int{0, 2, 3}, []int{0, 2}, "ranks 0 and 2, ring neighbours", nil}, // 1 lost before
		{nodes, []int{0, 1, 2, 3, 4, 5}, []int{2, 3}, "", nil},
		{nodes, []int{0, 1, 2, 3, 4, 5}, []int{4, 5}, "", nil},
		{nodes, []int{0, 1, 2, 3, 4, 5}, []int{1, 3}, "ranks 1 and 3, a rank and its buddy 2 ranks on, were both lost: rank 1's ZeRO-1 optimizer shard had its only copy on rank 3", nil},
		{nodes, []int{0, 1, 2, 3, 4, 5}, []int{4, 0}, "ranks 4 and 0, a rank and its buddy 2 ranks on", nil},
		{nodes, []int{0, 1, 4, 5}, []int{4, 5}, "", nil},    // node 1 lost before: 2 nodes of 2
		{nodes, []int{0, 2, 3, 4, 5}, []int{2, 3}, "", nil}, // uneven nodes (1, 2, 2): offset 2, off-node
		{nodes, []int{0, 2, 3, 4, 5}, []int{2, 4}, "ranks 2 and 4, a rank and its buddy 2 ranks on", nil},
		{nodes, []int{0, 1, 3, 4, 5, 6}, []int{4, 5}, "", []int{0, 0, 1, 2, 2, 1}}, // a joiner on node 1: offset 2
		{ringBuddies, []int{0, 1, 3, 4, 5, 6}, []int{4, 5}, "ranks 4 and 5, ring neighbours", []int{0, 0, 1, 2, 2, 1}},
		{nodes, []int{0, 1}, []int{1}, "", nil},
		{nodes, []int{0, 1}, []int{1}, "", []int{0, 0}}, // one node: the ring neighbour
	} {
		t.Run(fmt.Sprintf("%v/lost=%v", c.members, c.lost), func(t *testing.T) {
			on := c.on
			if on == nil {
				on = make([]int, len(c.members))
				for i, m := range c.members {
					on[i] = m / 2
				}
			}
			err := buddiesKept(c.offset)(c.members, on, c.lost)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}
