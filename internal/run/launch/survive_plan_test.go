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

// Every bad plan is an error naming what is wrong, never a panic.
func TestGenPlanRejected(t *testing.T) {
	for _, c := range []struct {
		name, plan, want string
	}{
		{"not json", `{"gen":`, "the plan of generation 1"},
		{"stale", `{"gen":0,"members":[0]}`, "says generation 0"},
		{"no members", `{"gen":1,"members":[]}`, "0 members"},
		{"too many", `{"gen":1,"members":[0,1,2,3,4]}`, "5 members"},
		{"out of range", `{"gen":1,"members":[0,7]}`, "member 7"},
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
