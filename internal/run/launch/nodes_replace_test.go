package launch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A replace request is checked field by field on the node that reads it:
// anything else is an error naming the field, never a panic or a process
// started under a name in use.
func TestCheckReplace(t *testing.T) {
	s := &survival{world: 4, place: &nodePlace{members: []int{0, 1}, perNode: 2}, pids: map[int]int{5: 42},
		spawn: func(int, int) (int, error) { return 0, nil }}
	req, err := s.checkReplace([]byte(`{"name":4,"local":1,"lost":3,"why":"replaces rank 3\u001b[2J"}`))
	require.NoError(t, err)
	require.Equal(t, 4, req.Name)
	require.Equal(t, 1, req.Local)
	require.NotContains(t, req.Why, "\x1b")
	for _, c := range []struct{ req, want string }{
		{`{"name":`, "unexpected end"},
		{`{"name":3,"local":0,"lost":3}`, "name 3"},
		{`{"name":68,"local":0,"lost":3}`, "name 68"},
		{`{"name":5,"local":0,"lost":3}`, "name 5"}, // in use
		{`{"name":4,"local":2,"lost":3}`, "local rank 2"},
		{`{"name":4,"local":-1,"lost":3}`, "local rank -1"},
		{`{"name":4,"local":0,"lost":-1}`, "replaced rank -1"},
		{`{"name":4,"why":"` + strings.Repeat("x", maxReplaceBytes) + `"}`, "more than"},
	} {
		_, err := s.checkReplace([]byte(c.req))
		require.ErrorContains(t, err, c.want, c.req)
	}
	s.spawn = nil
	_, err = s.checkReplace([]byte(`{"name":4,"local":1,"lost":3}`))
	require.ErrorContains(t, err, "starts no ranks")
}

// A replacement is placed on its node beside the node's ranks (a rejoin
// replaces them), and a node is gone once none of its ranks is a member:
// a replacement still waiting does not keep it in the job.
func TestReplacementPlaced(t *testing.T) {
	var gone []int
	p := &nodePlace{members: []int{0, 1}, perNode: 2, gone: func(node int, _ string) { gone = append(gone, node) }}
	s := &survival{world: 4, place: p, members: []int{0, 1, 2}, joiners: map[int]*joiner{}, revoked: map[int]bool{3: true}}
	name, err := s.addReplacement(1, "replaces rank 3")
	require.NoError(t, err)
	require.Equal(t, 4, name)
	require.Equal(t, []int{2, 3, 4}, p.ranksOf(1))
	require.Equal(t, 1, p.nodeOf(4))
	require.Equal(t, 1, p.nodeOf(2))
	s.members = []int{0, 1}
	s.nodesGone([]LostRank{{Rank: 2}})
	require.Equal(t, []int{1}, gone, "node 1's members are all removed; its replacement waits")
	s.forgetJoinersOf(1)
	require.Empty(t, s.joiners)
	_, err = s.addReplacement(1, "x")
	require.NoError(t, err)
	s.members = []int{0, 1, 2}
	_, err = s.addReplacement(1, "x")
	require.ErrorContains(t, err, "no room")
}
