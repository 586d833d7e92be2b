package launch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

func TestGenPlanRoundTrip(t *testing.T) {
	p := genPlan{Gen: 2, Members: []int{0, 3, 1}, Lost: []lostRank{{Rank: 2, Reason: "was killed by signal killed"}}}
	got, err := decodeGenPlan(p.encode(), 2, 4)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, 1, got.index(3))
	require.Equal(t, -1, got.index(2))
	require.Equal(t, "was killed by signal killed", got.lostReason(2))
	require.Equal(t, []int{2}, got.lostRanks())
}

// A grown plan: a joiner's name is past the job's ranks, its new rank is
// its place in Members.
func TestGenPlanJoined(t *testing.T) {
	p := genPlan{Gen: 3, Members: []int{0, 1, 3, 4}, Joined: []int{4}, Joins: []joinInfo{{Name: 4, Pid: 42, Started: 7, Why: "spare"}}}
	got, err := decodeGenPlan(p.encode(), 3, 4)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, []int{3}, got.joinedRanks())
}

// A plan across node launchers places each member on its node: a rank of
// a rejoined node (names 4 and 5, started as ranks 2 and 3 of node 1)
// finds its node-mates by the plan's nodes, not by its name, and so does a
// replacement (name 6) beside rank 2 on node 1.
func TestGenerationEnvNodes(t *testing.T) {
	p := genPlan{Gen: 2, Members: []int{0, 1, 4, 5}, Nodes: []int{0, 0, 1, 1}, Joined: []int{4, 5}}
	got, err := decodeGenPlan(p.encode(), 2, 4)
	require.NoError(t, err)
	require.Equal(t, p, got)
	start := rendezvous.Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2}
	env := generationEnv(start, 5, got.Members, got.Nodes)
	require.Equal(t, [4]int{3, 4, 1, 2}, [4]int{env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize})
	start = rendezvous.Env{Rank: 0, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2}
	env = generationEnv(start, 1, []int{0, 1, 2, 6}, []int{0, 0, 1, 1})
	require.Equal(t, [4]int{1, 4, 1, 2}, [4]int{env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize})
	start = rendezvous.Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2}
	env = generationEnv(start, 6, []int{0, 1, 2, 6}, []int{0, 0, 1, 1})
	require.Equal(t, [4]int{3, 4, 1, 2}, [4]int{env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize})
	// Without nodes (a plan of an older launcher, or one host): by name.
	env = generationEnv(start, 3, []int{0, 2, 3}, nil)
	require.Equal(t, [4]int{2, 3, 1, 2}, [4]int{env.Rank, env.WorldSize, env.LocalRank, env.LocalWorldSize})
}

// Every bad plan is an error naming what is wrong, never a panic.
func TestGenPlanRejected(t *testing.T) {
	for _, c := range []struct {
		name, plan, want string
	}{
		{"not json", `{"gen":`, "the plan of generation 1"},
		{"stale", `{"gen":0,"members":[0]}`, "says generation 0"},
		{"no members", `{"gen":1,"members":[]}`, "0 members"},
		// A grown job's plan (-nnodes MIN:MAX) may name more members than
		// the start's world, but no more than the names it may give.
		{"too many", `{"gen":1,"members":[0` + strings.Repeat(",1", 4+maxJoiners) + `]}`, "69 members: want 1..68"},
		{"grown, a name twice", `{"gen":1,"members":[0,1,2,3,4,5,4]}`, "member 4"},
		{"out of range", `{"gen":1,"members":[0,68]}`, "member 68"},
		{"joined not a member", `{"gen":1,"members":[0,1],"joined":[4]}`, "joined rank 4"},
		{"joined an old name", `{"gen":1,"members":[0,1],"joined":[1]}`, "joined rank 1"},
		{"joined twice", `{"gen":1,"members":[0,4],"joined":[4,4]}`, "joined rank 4"},
		{"joins not matching", `{"gen":1,"members":[0,4],"joined":[4],"joins":[{"name":4},{"name":5}]}`, "describes 2 of its 1"},
		{"twice", `{"gen":1,"members":[1,1]}`, "member 1"},
		{"negative", `{"gen":1,"members":[-1]}`, "member -1"},
		{"lost member", `{"gen":1,"members":[0,1],"lost":[{"rank":1,"reason":"x"}]}`, "lost rank 1"},
		{"nodes not matching", `{"gen":1,"members":[0,1],"nodes":[0]}`, "places 1 of its 2 members"},
		{"node out of range", `{"gen":1,"members":[0,1],"nodes":[0,-1]}`, "node out of range"},
		{"huge", `{"gen":1,"members":[0],"lost":[{"rank":2,"reason":"` + strings.Repeat("x", maxPlanBytes) + `"}]}`, "more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeGenPlan([]byte(c.plan), 1, 4)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// A restart plan's reason and a lost rank's are shown through
// untrusted.Text: no control characters reach the terminal.
func TestGenPlanTextsCleaned(t *testing.T) {
	p, err := decodeGenPlan([]byte(`{"gen":1,"restart":"bad\u001b[2J"}`), 1, 4)
	require.NoError(t, err)
	require.NotContains(t, p.Restart, "\x1b")
	p, err = decodeGenPlan([]byte(`{"gen":1,"members":[0],"lost":[{"rank":1,"reason":"x\u001b[2J"}]}`), 1, 4)
	require.NoError(t, err)
	require.NotContains(t, p.lostReason(1), "\x1b")
}
