package launch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
