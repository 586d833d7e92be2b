package launch

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// genPlan is the launcher's plan of a generation (rendezvous.Generation's
// vocabulary), published at GenerationKey(runID, Gen, "plan"): who is in
// it, in rank order, who was removed and why, or that the job falls back
// to a checkpoint restart. A grow (ranks joining, survive_grow.go) is a
// plan whose Members include ranks that were not in the previous
// generation, named in Joined (and described in Joins, in the same order).
// A rank's name is its rank at the job's start, or for a rank started to
// join, a name of world..world+maxJoiners-1 no rank had before.
type genPlan struct {
	Gen int `json:"gen"`
	// Members are the generation's ranks by their rank at the job's
	// start; the new rank of Members[i] is i.
	Members []int `json:"members"`
	// Nodes, across node launchers, is the node each member runs on
	// (Nodes[i] is Members[i]'s), so that every rank of the generation
	// places the others on their hosts (generationEnv): a joiner's name
	// says nothing of its node. Absent on one host.
	Nodes  []int      `json:"nodes,omitempty"`
	Lost   []lostRank `json:"lost,omitempty"`
	Joined []int      `json:"joined,omitempty"`
	Joins  []joinInfo `json:"joins,omitempty"`
	// Restart, when not empty, says why the job does not continue: every
	// rank stops and the launcher restarts the job from its checkpoint
	// (or ends it, without restarts).
	Restart string `json:"restart,omitempty"`
}

// lostRank is a rank removed from the job.
type lostRank struct {
	Rank   int    `json:"rank"`
	Reason string `json:"reason"`
}

const maxPlanBytes = 64 << 10

func (p genPlan) encode() []byte {
	b, _ := json.Marshal(p) // plain fields: cannot fail
	return b
}

// decodeGenPlan reads the plan of generation gen of a job that started with
// world ranks, checking every field, so that a damaged or stale plan is an
// error naming it, never a panic.
func decodeGenPlan(b []byte, gen, world int) (genPlan, error) {
	var p genPlan
	if len(b) > maxPlanBytes {
		return p, fmt.Errorf("the plan of generation %d is %d bytes, more than %d", gen, len(b), maxPlanBytes)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("the plan of generation %d: %w", gen, err)
	}
	switch {
	case p.Gen != gen:
		return p, fmt.Errorf("the plan at generation %d's key says generation %d", gen, p.Gen)
	case p.Restart != "":
		p.Restart = untrusted.Text(p.Restart, maxShownText)
		return p, nil
	case len(p.Members) == 0 || len(p.Members) > world+maxJoiners:
		// A job may grow beyond its start's world (-nnodes MIN:MAX), up
		// to the names it may give.
		return p, fmt.Errorf("the plan of generation %d has %d members: want 1..%d", gen, len(p.Members), world+maxJoiners)
	case len(p.Lost) > world+maxJoiners || len(p.Joined) > maxJoiners:
		return p, fmt.Errorf("the plan of generation %d names %d lost and %d joined ranks of a job of %d and %d joining", gen, len(p.Lost), len(p.Joined), world, maxJoiners)
	case len(p.Joins) != 0 && len(p.Joins) != len(p.Joined):
		return p, fmt.Errorf("the plan of generation %d describes %d of its %d joined ranks", gen, len(p.Joins), len(p.Joined))
	case len(p.Nodes) != 0 && len(p.Nodes) != len(p.Members):
		return p, fmt.Errorf("the plan of generation %d places %d of its %d members on nodes", gen, len(p.Nodes), len(p.Members))
	case slices.ContainsFunc(p.Nodes, func(n int) bool { return n < 0 || n >= maxNodeRanks }):
		return p, fmt.Errorf("the plan of generation %d places a member on a node out of range 0..%d", gen, maxNodeRanks-1)
	}
	names := world + maxJoiners
	seen := make([]bool, names)
	for _, m := range p.Members {
		if m < 0 || m >= names || seen[m] {
			return p, fmt.Errorf("the plan of generation %d: member %d is out of range 0..%d or named twice", gen, m, names-1)
		}
		seen[m] = true
	}
	for i, l := range p.Lost {
		if l.Rank < 0 || l.Rank >= names || seen[l.Rank] {
			return p, fmt.Errorf("the plan of generation %d: lost rank %d is out of range or also a member", gen, l.Rank)
		}
		p.Lost[i].Reason = untrusted.Text(l.Reason, maxShownText)
	}
	for i, j := range p.Joined {
		if j < world || j >= names || !seen[j] || slices.Index(p.Joined, j) != i {
			return p, fmt.Errorf("the plan of generation %d: joined rank %d is not a new member of it (names %d..%d), or is named twice", gen, j, world, names-1)
		}
	}
	for i := range p.Joins {
		p.Joins[i].Why = untrusted.Text(p.Joins[i].Why, maxShownText)
	}
	return p, nil
}

// index is member m's rank in the plan's generation, -1 when m is not in
// it.
func (p genPlan) index(m int) int { return slices.Index(p.Members, m) }

// lostReason is why m was removed, as the plan says.
func (p genPlan) lostReason(m int) string {
	for _, l := range p.Lost {
		if l.Rank == m {
			return l.Reason
		}
	}
	return "it is not a member of generation " + strconv.Itoa(p.Gen)
}

// joinedRanks are the joined ranks' ranks in the plan's generation.
func (p genPlan) joinedRanks() []int {
	out := make([]int, len(p.Joined))
	for i, j := range p.Joined {
		out[i] = p.index(j)
	}
	return out
}

func (p genPlan) lostRanks() []int {
	out := make([]int, len(p.Lost))
	for i, l := range p.Lost {
		out[i] = l.Rank
	}
	return out
}

// placeMembers, across node launchers, gives plan p each member's node
// (genPlan.Nodes); on one host nothing.
func (s *survival) placeMembers(p *genPlan) {
	if s.place == nil || p.Restart != "" {
		return
	}
	p.Nodes = make([]int, len(p.Members))
	for i, m := range p.Members {
		p.Nodes[i] = max(s.place.nodeOf(m), 0)
	}
}
