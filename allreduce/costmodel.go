package allreduce

import (
	"math/bits"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// The inter-node bytes table: how many bytes of an AllReduce of M bytes
// per rank each algorithm sends from a node to other nodes, by the
// formulas of the algorithms' doc comments, on N ranks in K nodes of L
// consecutive ranks (cost.NodesShape, even nodes). It is what a slow link
// between nodes charges: at the link's rate β, a node whose ranks share
// one NIC (Model.NICs 1) needs at least its bytes·β, the ranks' links
// each at least their busiest rank's. The floor, the fewest bytes any
// all-reduce must send from a node, is 2(K-1)/K·M (each node's share of
// the result must leave it and every other node's must arrive).
//
// The schedule table's formulas (schedules.go: ringCost, hdCost,
// torusCost, ...) price these bytes over the model's Inter link and the
// rest over its Intra link; this table states the volumes alone, for
// -explain, the docs' floor and the tests of the model's logic, in one
// place to update when an algorithm changes what it sends between nodes.
// interNodeVolume is the table: algorithm a's bytes from the busiest node
// and from its busiest rank; ok false for the algorithms it does not give.
func interNodeVolume(a Algorithm, n, k, l int, m float64) (perNode, perRank float64, ok bool) {
	across := 2 * float64(k-1) / float64(k) * m // the floor
	switch a {
	case Ring:
		// The ring in rank order leaves each node once, from its last
		// rank, which sends 2(N-1)/N·M.
		x := 2 * float64(n-1) / float64(n) * m
		return x, x, true
	case Doubling:
		// Recursive doubling exchanges the whole buffer at every step;
		// the steps of distance ≥ L (log2 K of them) cross, from every
		// rank.
		x := float64(log2ceil(k)) * m
		return float64(l) * x, x, true
	case HalvingDoubling:
		// The masks run 1, 2, ..., P/2: the reduce-scatter's step of mask
		// 2^i sends M/2^(i+1) and the masks ≥ L cross, so a rank sends
		// M(1/L - 1/P) between nodes in each half, a node 2(1 - L/P)·M =
		// 2(K-1)/K·M in all: the floor.
		x := 2 * m * (1/float64(l) - 1/float64(n))
		return float64(l) * x, x, true
	case Hierarchical:
		// Only the local roots send between nodes, 2(K-1)/K·M each by the
		// ring.
		return across, across, true
	case Torus:
		// Each of a node's L ranks all-reduces its chunk of M/L with the
		// other nodes: 2(K-1)/K·M per node, spread over its ranks.
		return across, across / float64(l), true
	case Mesh:
		// Each of a node's L ranks all-reduces the whole buffer with the
		// other nodes: L times Torus's.
		return float64(l) * across, across, true
	}
	return 0, 0, false
}

// InterNodeBytes is what algorithm a sends between nodes in an AllReduce
// of the given bytes per rank on shape s (interNodeTable): from the
// busiest node in all (perNode) and from its busiest rank (perRank). ok
// is false for an algorithm the table does not give (Tree, whose
// double binary tree crosses between nodes where its numbering puts the
// edges; Direct, which needs memory shared by every rank) or a shape it
// does not cover (one node; nodes of different sizes; Doubling and
// halving-doubling on ranks or nodes that are not powers of two, whose
// folds send more).
func InterNodeBytes(a Algorithm, s cost.Shape, bytes int) (perNode, perRank float64, ok bool) {
	if s.Nodes < 2 || s.Ranks != s.Nodes*s.LocalSize {
		return 0, 0, false
	}
	if (a == Doubling || a == HalvingDoubling) && (bits.OnesCount(uint(s.Ranks)) != 1 || bits.OnesCount(uint(s.LocalSize)) != 1) {
		return 0, 0, false
	}
	return interNodeVolume(a, s.Ranks, s.Nodes, s.LocalSize, float64(max(bytes, 0)))
}

// InterNodeFloor is the fewest bytes an AllReduce of the given bytes per
// rank must send from a node of shape s to the others: 2(K-1)/K·M.
func InterNodeFloor(s cost.Shape, bytes int) float64 {
	if s.Nodes < 2 {
		return 0
	}
	return 2 * float64(s.Nodes-1) / float64(s.Nodes) * float64(max(bytes, 0))
}
