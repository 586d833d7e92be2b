package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Scaling up: a node joining a running job (-nnodes MIN:MAX -on-failure
// continue -heal; docs/elastic.md), as torchrun's --nnodes MIN:MAX lets
// a node join. Vocabulary: the start's nodes are 0..MIN-1, which node 0
// waits for before the first attempt (nodes_join.go, as with -nnodes
// MIN); a new node is a launcher given a -node-rank of MIN..MAX-1 that
// comes after node 0's last call (nodes_lastcall.go; one that comes in it
// is in the first attempt), which joins while the job runs. It goes the
// rejoin's way (nodes_rejoin.go):
//
//  1. its launcher dials node 0's launcher store and, its -node-rank
//     being beyond the start's (claimNode) and node 0's first plan not
//     naming it (enter), asks node 0 to take it in with a request to
//     rejoin that carries its -nnodes; a request posted before node 0's
//     first attempt runs is read once it does;
//  2. node 0 (admitRejoin) refuses, naming why, a -node-rank of MAX or
//     more or another -nnodes, a node already in the job (admitted or
//     taken in during this attempt and not lost since: two launchers
//     given one -node-rank), another -ranks or run id (the rejoin's
//     checks), a group of more than MAX × -ranks ranks, or one over
//     which the global batch cannot be split (Elastic.Fits: fewer
//     examples than ranks); else it admits the node: its ranks get
//     joining ranks' names (world.., never a member's), and the node is
//     pending;
//  3. its ranks start as joiners, announce themselves, and once all
//     have, the coordinator grows the group at the next step boundary
//     beyond the start's world, up to its capacity MAX × -ranks
//     (survival.capacity), and the members heal them (parameters,
//     optimizer state, sampler position and RNG state; striped,
//     checksummed, the replicas compared). The global batch is kept and
//     split over the grown world as after any generation change
//     (trainer/split.go), so every example is used once per epoch;
//  4. once taken in (noteBack), the node is added: node 0 waits for its
//     report after the attempt (withAdded) and it takes part in the
//     later attempts as a member node (a restart runs on every node that
//     came back, the checkpoint's world permitting). A node lost before
//     it is taken in is no longer pending, so that a launcher started
//     for it again may ask anew; one lost after is gone as any node
//     (survive_nodes.go).
//
// A new node's ranks are started as ranks of its attempt's world (its
// RANK as if it were node 0's, which a joining rank does not use: it
// goes by its name).

// maxNodes is the most nodes -nnodes allows.
const maxNodes = 4096

// nodesValue is the -nnodes flag: N (the job runs on N nodes), or
// MIN:MAX (it starts on MIN and may grow to MAX).
type nodesValue struct{ f *Flags }

func (v nodesValue) String() string {
	if v.f == nil {
		return "" // the flag package's zero value, so that -h shows the default
	}
	return v.f.nodesText()
}

func (v nodesValue) Set(s string) error {
	lo, hi, err := ParseNodes(s)
	if err != nil {
		return err
	}
	v.f.Nnodes, v.f.MaxNodes = lo, hi
	return nil
}

// ParseNodes reads an -nnodes value: "N" (N:N) or "MIN:MAX", each
// 1..maxNodes, MIN at most MAX.
func ParseNodes(s string) (lo, hi int, err error) {
	a, b, pair := strings.Cut(strings.TrimSpace(s), ":")
	num := func(x, what string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 1 || n > maxNodes {
			return 0, fmt.Errorf("%s %q: want a number of nodes, 1..%d (-nnodes N, or MIN:MAX to let nodes join the running job)", what, x, maxNodes)
		}
		return n, nil
	}
	if !pair {
		lo, err = num(a, "the node count")
		return lo, lo, err
	}
	if lo, err = num(a, "MIN"); err != nil {
		return 0, 0, err
	}
	if hi, err = num(b, "MAX"); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("%d:%d: MIN (the nodes the job starts with) is more than MAX (the most it may grow to)", lo, hi)
	}
	return lo, hi, nil
}

// MostNodes is the most nodes the job may run on: MAX of -nnodes
// MIN:MAX, else -nnodes.
func (f Flags) MostNodes() int { return max(f.Nnodes, f.MaxNodes) }

// nodesText words -nnodes as given: "2", or "1:2".
func (f Flags) nodesText() string { return nodesWords(f.Nnodes, f.MaxNodes) }

func nodesWords(lo, hi int) string {
	if hi > lo {
		return strconv.Itoa(lo) + ":" + strconv.Itoa(hi)
	}
	return strconv.Itoa(lo)
}

// worldFits reports whether a launcher's world size suits -nnodes and
// -ranks ranks: nodes × ranks for a node count the flag allows.
func (f Flags) worldFits(ranks, world int) bool {
	return world%ranks == 0 && world/ranks >= f.Nnodes && world/ranks <= f.MostNodes()
}

// mostNodes is Config's MostNodes.
func (cfg Config) mostNodes() int { return max(cfg.Nnodes, cfg.MaxNodes) }

// checkScaleUp checks that a job that may grow can: new nodes join as
// healed joiners; and its last call (nodes_lastcall.go), which a job that
// does not grow ignores.
func (e *Elastic) checkScaleUp(cfg Config) error {
	switch {
	case e.LastCall < 0:
		return fmt.Errorf("launch: last call %v: must not be negative", e.LastCall)
	case cfg.MaxNodes <= cfg.Nnodes:
		return nil
	case !e.Continue || !e.Heal:
		return fmt.Errorf("launch: -nnodes %d:%d: nodes joining a running job need survivors continuing and healing (-on-failure continue -heal)", cfg.Nnodes, cfg.MaxNodes)
	case e.Spares > 0:
		return fmt.Errorf("launch: -nnodes %d:%d with spares: a spare would run on node 0 and take a new node's place", cfg.Nnodes, cfg.MaxNodes)
	}
	return nil
}

// capacity is the most ranks the group may grow to: with several nodes,
// MAX × -ranks (place.most nodes); else the world at the start.
func (s *survival) capacity() int {
	if s.place != nil {
		return max(s.world, s.place.most*s.place.perNode)
	}
	return s.world
}

// size is the group's members and joiners waiting, which the coordinator
// counts against its capacity.
func (s *survival) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members) + len(s.joiners)
}

// scaleState is node 0's record of new nodes: pending, admitted and not
// yet taken in; added, taken in during the attempt running.
type scaleState struct {
	mu      sync.Mutex
	pending map[int]bool
	added   []int
}

// growRefusal is why node 0 refuses req, a request of a node not in the
// attempt's plan to join it (step 2 above); "" admits it, and marks it
// pending.
func (r *nodeRdzv) growRefusal(s *survival, req rejoinRequest) string {
	node, most := req.Node, r.cfg.mostNodes()
	want := nodesWords(r.cfg.Nnodes, r.cfg.MaxNodes)
	switch {
	case node >= most && most > r.cfg.Nnodes:
		return fmt.Sprintf("node %d is beyond this job's -nnodes %s: it takes at most %d nodes, -node-rank 0..%d", node, want, most, most-1)
	case node >= most:
		return fmt.Sprintf("node %d is not a node of this job (-nnodes %s): a job that nodes may join runs with -nnodes MIN:MAX", node, want)
	case req.MaxNodes != 0 && (req.Nnodes != r.cfg.Nnodes || req.MaxNodes != most):
		return fmt.Sprintf("it runs -nnodes %s; the job's nodes run %s", nodesWords(req.Nnodes, req.MaxNodes), want)
	}
	r.goneMu.Lock()
	gone := r.gone[node] != ""
	r.goneMu.Unlock()
	r.sc.mu.Lock()
	defer r.sc.mu.Unlock()
	if r.sc.pending[node] || (slices.Contains(r.sc.added, node) && !gone) {
		return fmt.Sprintf("node %d is in the job already (its launcher joined it while the job ran): were two launchers given -node-rank %d? "+
			"(if its launcher was lost only just now, start it again once node 0 says the job continues without it)", node, node)
	}
	n := s.size() + req.Ranks
	if s.e.Fits != nil {
		if err := s.e.Fits(n); err != nil {
			return fmt.Sprintf("the job cannot grow to %s: %v", Count(n, "rank"), err)
		}
	}
	if r.sc.pending == nil {
		r.sc.pending = map[int]bool{}
	}
	r.sc.pending[node] = true
	return ""
}

// notPending forgets node's admission: its ranks were not taken in (its
// launcher was lost, or the attempt ended first) or addRemote refused
// them.
func (r *nodeRdzv) notPending(node int) {
	r.sc.mu.Lock()
	defer r.sc.mu.Unlock()
	delete(r.sc.pending, node)
}

// takenIn, on node 0, records that node's ranks were taken into the
// attempt: a new node is added (noteBack calls it for every node back),
// which it reports.
func (r *nodeRdzv) takenIn(node int) bool {
	r.sc.mu.Lock()
	defer r.sc.mu.Unlock()
	if !r.sc.pending[node] {
		return false
	}
	delete(r.sc.pending, node)
	if !slices.Contains(r.sc.added, node) {
		r.sc.added = append(r.sc.added, node)
	}
	return true
}

// withAdded is plan with the nodes taken in during its attempt (after
// its members), which node 0 waits for after the attempt; it starts the
// next attempt's record afresh.
func (r *nodeRdzv) withAdded(plan nodePlan) nodePlan {
	r.sc.mu.Lock()
	defer r.sc.mu.Unlock()
	plan.Members = slices.Clone(plan.Members)
	for _, node := range r.sc.added {
		if !slices.Contains(plan.Members, node) {
			plan.Members = append(plan.Members, node)
		}
	}
	r.sc.added, r.sc.pending = nil, nil
	return plan
}

// growWhy is why a new node's ranks join, for the launcher's lines and
// the heal's report.
func (r *nodeRdzv) growWhy(node int) string {
	return fmt.Sprintf("node %d joins the running job (scale up, -nnodes %s)", node, nodesWords(r.cfg.Nnodes, r.cfg.MaxNodes))
}
