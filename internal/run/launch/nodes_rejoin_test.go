package launch

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rejoinRdzv is node rank node's side of a job of 2 nodes of 2 ranks, its
// messages in errOut.
func rejoinRdzv(node int, errOut *bytes.Buffer) *nodeRdzv {
	w := outputs{out: &syncWriter{w: &bytes.Buffer{}}, errOut: &syncWriter{w: errOut}}
	return &nodeRdzv{cfg: Config{Ranks: 2, Nnodes: 2}, e: &Elastic{Heal: true}, w: w, node: node}
}

// An admission that does not check — a plan without this node, names out
// of the joining range or twice, too few names, a last plan — is refused
// naming what is wrong; a good one passes.
func TestCheckRejoinAnswer(t *testing.T) {
	good := func() rejoinAnswer {
		return rejoinAnswer{Plan: nodePlan{Attempt: 0, RunID: "nodes-1", StorePort: 40000, Members: []int{0, 1}, RanksPerNode: 2, JobID: "job-1"},
			Names: []int{4, 5}}
	}
	for _, c := range []struct {
		name string
		edit func(a *rejoinAnswer)
		want string
	}{
		{"good", func(a *rejoinAnswer) {}, ""},
		{"without this node", func(a *rejoinAnswer) { a.Plan.Members = []int{0} }, "do not include node 1"},
		{"a member's name", func(a *rejoinAnswer) { a.Names = []int{3, 5} }, "name 3: want a joining rank's, 4..67"},
		{"past the names", func(a *rejoinAnswer) { a.Names = []int{4, 68} }, "name 68"},
		{"a name twice", func(a *rejoinAnswer) { a.Names = []int{4, 4} }, "name 4: want a joining rank's, 4..67, once"},
		{"one name for two ranks", func(a *rejoinAnswer) { a.Names = []int{4} }, "1 names for 2 ranks"},
		{"a last plan", func(a *rejoinAnswer) { a.Plan.Done = true }, "not a running attempt"},
		{"another -ranks", func(a *rejoinAnswer) { a.Plan.RanksPerNode = 3 }, "ranks_per_node 3"},
		{"a job id with a newline", func(a *rejoinAnswer) { a.Plan.JobID = "job\n1" }, "job_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := good()
			c.edit(&a)
			err := rejoinRdzv(1, &bytes.Buffer{}).checkAnswer(&a)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}

// Node 0 refuses, naming why, a request from a node not in the attempt,
// with another -ranks, another job's run id, or for a node still in the
// job; it refuses before it touches the coordinator.
func TestAdmitRejoinRefuses(t *testing.T) {
	plan := nodePlan{Attempt: 1, RunID: "nodes-abc-restart1", StorePort: 40000, Members: []int{0, 1}, RanksPerNode: 2}
	for _, c := range []struct {
		name string
		req  rejoinRequest
		gone bool
		want string
	}{
		{"node 0", rejoinRequest{Node: 0, Ranks: 2}, true, "node 0's launcher leads the job: it cannot rejoin it"},
		{"a node past the job's", rejoinRequest{Node: 2, Ranks: 2}, true, "node 2 is not a node of this job (-nnodes 2): a job that nodes may join runs with -nnodes MIN:MAX"},
		{"another -ranks", rejoinRequest{Node: 1, Ranks: 3}, true, "it runs -ranks 3; the job's nodes run 2"},
		{"another job", rejoinRequest{Node: 1, Ranks: 2, RunID: "other"}, true, `its RINGDDP_RUN_ID is "other", but this job runs as "nodes-abc": another job's launcher?`},
		{"a node still in the job", rejoinRequest{Node: 1, Ranks: 2, RunID: "nodes-abc"}, false, "node 1 is in the job: node 0 has not seen it leave (were two launchers given -node-rank 1? if its launcher was lost only just now, start it again once node 0 says the job continues without it)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var errOut bytes.Buffer
			r := rejoinRdzv(0, &errOut)
			if c.gone {
				r.gone = map[int]string{1: "every rank of it was removed"}
			}
			ans := r.admitRejoin(context.Background(), nil, plan, c.req, nil)
			require.Equal(t, c.want, ans.Refused)
			require.Empty(t, ans.Names)
			require.True(t, strings.HasPrefix(errOut.String(), "launch: node 0: refused node "), errOut.String())
			require.Contains(t, errOut.String(), c.want)
		})
	}
}

// A node that rejoined places its joining ranks: nodeOf names their node,
// ranksOf gives them in place of the node's ranks at the start, and nodes
// lists a node that joined besides the attempt's.
func TestNodePlaceRejoined(t *testing.T) {
	p := &nodePlace{members: []int{0, 1}, perNode: 2}
	require.Equal(t, []int{2, 3}, p.ranksOf(1))
	require.Equal(t, 1, p.nodeOf(3))
	require.Equal(t, -1, p.nodeOf(4), "a name nobody placed")
	require.Equal(t, -1, p.nodeOf(-1))
	p.setNames(1, []int{4, 5})
	require.Equal(t, []int{4, 5}, p.ranksOf(1))
	require.Equal(t, 1, p.nodeOf(5))
	require.Equal(t, 1, p.nodeOf(2), "its old ranks stay placed, for their reports")
	require.Equal(t, []int{0, 1}, p.nodes())
	require.Nil(t, p.ranksOf(7))
}
