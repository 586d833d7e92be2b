package allreduce

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// The topology-aware AllReduce algorithms — Hierarchical (hierarchical.go),
// Torus (torus.go) and Mesh (mesh.go) — are compositions of collectives on
// sub-groups of the group, built here from its Topology without further
// communication. Vocabulary, for a group of N ranks on K nodes:
//
//   - node k, its local size L_k (ranks on it) and its local ranks
//     0..L_k-1 (its ranks in rank order), as Topology defines them; nodes
//     may differ in size. L is the largest node's size.
//   - intra-node group: the ranks of one node, numbered by local rank.
//   - slot: one of L slots, s = 0..L-1. On node k, local rank l holds the
//     slots of ChunkBounds(L, L_k, l): one each on the largest nodes, and
//     consecutive runs of ⌈L/L_k⌉ or ⌊L/L_k⌋ on smaller ones, so every
//     slot has exactly one holder on every node. Torus splits the buffer
//     into L chunks (ChunkBounds(count, L, s)), chunk s going with slot s;
//     Mesh and Hierarchical use slots only to pick inter-node groups.
//   - inter-node group s: the holder of slot s on every node, numbered by
//     node (rank k of the group is on node k). Inter-node group 0 is every
//     node's local rank 0, its local root.
//
// Every member derives the same sub-groups (members and header id, from
// childID of the group's id), and every member runs the same nested calls
// on each of them in the same order, so their sequence numbers stay in
// step. A rank in several inter-node groups (a smaller node's rank holds
// several slots) runs them in increasing slot order; since every rank
// does, the lowest unfinished slot always has all its members at it, and
// the composition cannot deadlock.
//
// The sub-groups run Auto, choosing by the parent's cost model for their
// own shape (one node, or one rank per node; sub-groups never share
// memory), with their own header
// ids and sequence numbers. The parent's sequence numbers are used only
// for the agreement step each algorithm starts with (agree.go): a rank
// that called something else finds out there, with both calls named as
// the caller wrote them, before any message of a sub-group is sent. The
// Topology itself is learnt on the first call by an all-gather on a
// sub-group of all the ranks (so the parent's numbering stays the
// caller's) and kept, as Group.Topology keeps it.
//
// Exactness: each phase is a collective that ends bitwise identical on
// its members and the same run to run (doc.go), so a phase's result on a
// rank depends only on the phase's inputs in its members' positions. Every
// inter-node group has one member per node, numbered by node, and the
// members' inputs are their node's results, so every inter-node group of
// the same buffer runs the same algorithm on the same inputs and computes
// the same bits.

// hierarchy is the sub-groups of the topology-aware algorithms on one
// group, built on the first call that needs them.
type hierarchy struct {
	topo    Topology
	node    int     // this rank's node
	local   int     // this rank's local rank
	members [][]int // the ranks of each node, in rank order
	slots   int     // L: the largest node's size
	intra   *Group  // this rank's node; nil when it is alone on it
	inter   map[int]*Group
}

// hierarchy returns g's sub-groups, learning the Topology the first time.
// It runs inside a collective that holds the turn, after its agreement
// step.
func (g *Group) hierarchy(ctx context.Context) (*hierarchy, error) {
	if g.hier != nil {
		return g.hier, nil
	}
	topo, err := g.learnTopology(ctx)
	if err != nil {
		return nil, err
	}
	hy := &hierarchy{topo: topo, node: topo.Node(g.rank), members: make([][]int, topo.Nodes()), inter: map[int]*Group{}}
	for r := range g.size {
		k := topo.Node(r)
		if r == g.rank {
			hy.local = len(hy.members[k])
		}
		hy.members[k] = append(hy.members[k], r)
	}
	for _, m := range hy.members {
		hy.slots = max(hy.slots, len(m))
	}
	if mine := hy.members[hy.node]; len(mine) > 1 {
		hy.intra = g.algorithmSubgroup(mine, childID(g.id, "intra-node", uint64(hy.node)))
		hy.intra.shape = &cost.Shape{Ranks: len(mine), Nodes: 1, LocalSize: len(mine)}
	}
	g.hier = hy
	return hy, nil
}

// learnTopology is g's Topology: the cached one, or learnt by a nested
// all-gather on a sub-group of all of g's ranks (not on g, whose sequence
// numbers are its callers').
func (g *Group) learnTopology(ctx context.Context) (Topology, error) {
	g.seq.mu.Lock()
	t := g.topo
	g.seq.mu.Unlock()
	if t != nil {
		return *t, nil
	}
	all := make([]int, g.size)
	for r := range all {
		all[r] = r
	}
	sub := g.subgroup(all, childID(g.id, "topology"))
	topo, err := sub.topology(ctx, sub.nested)
	if err != nil {
		return Topology{}, fmt.Errorf("learning the topology: %w", err)
	}
	g.seq.mu.Lock()
	if g.topo == nil {
		g.topo = &topo
	}
	g.seq.mu.Unlock()
	return topo, nil
}

// algorithmSubgroup is g.subgroup running Auto, and the cost model's
// Broadcast/Reduce schedules: a sub-group of a topology-aware algorithm
// must not run that algorithm itself, and runs what its formula prices.
func (g *Group) algorithmSubgroup(members []int, id uint32) *Group {
	sub := g.subgroup(members, id)
	sub.asked = [KindBarrier]uint8{}
	return sub
}

// nodes is K, the number of nodes.
func (hy *hierarchy) nodes() int { return len(hy.members) }

// localSize is the size of this rank's node.
func (hy *hierarchy) localSize() int { return len(hy.members[hy.node]) }

// mySlots is the range of slots this rank holds on its node.
func (hy *hierarchy) mySlots() (lo, hi int) {
	return ChunkBounds(hy.slots, hy.localSize(), hy.local)
}

// slotHolder is the local rank that holds slot s on a node of size l.
func slotHolder(slots, l, s int) int {
	for i := range l {
		if _, hi := ChunkBounds(slots, l, i); s < hi {
			return i
		}
	}
	panic(fmt.Sprintf("allreduce: slot %d of %d on a node of %d", s, slots, l))
}

// interGroup is inter-node group s: slot s's holder on every node, by
// node. This rank must hold slot s. sideBySide is how many inter-node
// groups of a node run at once (1 for hierarchical, L for torus and
// mesh): with NICs shared (Model.NICs) they share them, and the group's
// model (which Auto chooses by) says so, as the compositions' formulas
// do (Model.sharedBy).
func (hy *hierarchy) interGroup(g *Group, s, sideBySide int) *Group {
	if sub, ok := hy.inter[s]; ok {
		return sub
	}
	members := make([]int, len(hy.members))
	for k, m := range hy.members {
		members[k] = m[slotHolder(hy.slots, len(m), s)]
	}
	sub := g.algorithmSubgroup(members, childID(g.id, "inter-node", uint64(s)))
	sub.shape = &cost.Shape{Ranks: len(members), Nodes: len(members), LocalSize: 1}
	sub.model = sub.model.SharedBy(sideBySide)
	hy.inter[s] = sub
	return sub
}

// sumFor is the operator the phases of a composition run for op: Avg is
// Sum, divided by the group's size once at the end.
func sumFor(op ReduceOp) ReduceOp {
	if op == Avg {
		return Sum
	}
	return op
}

// runPhase runs c on sub-group sub inside the current collective, naming
// the phase and the sub-group's ranks (the root group's numbering) in its
// error.
func runPhase(ctx context.Context, phase string, sub *Group, c *call) error {
	if err := sub.nested(ctx, c); err != nil {
		return fmt.Errorf("%s among ranks %v: %w", phase, sub.world, err)
	}
	return nil
}
