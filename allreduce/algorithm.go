package allreduce

import (
	"fmt"
	"strings"
)

// Algorithm selects how AllReduce runs.
type Algorithm uint8

// The AllReduce algorithms. Each has a file of its own with its schedule,
// steps and bytes on the wire, and its formula, and one row in the
// schedule table (schedules.go); adding one is that file, a constant here
// and the row.
const (
	// Auto picks, per size class, the algorithm the group's cost model
	// predicts fastest (Choose; package cost), among those whose
	// requirements the group meets.
	Auto Algorithm = iota
	// Ring is reduce-scatter then all-gather around the ring of ranks
	// (ring.go).
	Ring
	// Direct reads peers' buffers in place (direct.go); in-process ranks
	// only.
	Direct
	// Doubling is recursive doubling: ⌈log2 N⌉ whole-buffer exchanges,
	// for small buffers (doubling.go).
	Doubling
	// Tree is NCCL's double binary tree, pipelined in segments: O(log N)
	// latency at any N (dtree.go).
	Tree
	// HalvingDoubling is Rabenseifner's algorithm: recursive-halving
	// reduce-scatter then recursive-doubling all-gather, bandwidth-optimal
	// in ⌈log2 N⌉ steps each way (hd.go).
	HalvingDoubling
	// Hierarchical is the 2D ring: intra-node reduce, an inter-node
	// all-reduce among one rank per node, intra-node broadcast
	// (hierarchical.go). Needs the topology.
	Hierarchical
	// Torus is the 2D torus: intra-node reduce-scatter, parallel
	// inter-node all-reduces of each rank's chunk, intra-node all-gather
	// (torus.go). Needs the topology.
	Torus
	// Mesh is the 2D mesh: intra-node all-reduce, then parallel
	// inter-node all-reduces of the whole buffer (mesh.go). Needs the
	// topology.
	Mesh
)

// spec is a's row of the schedule table; ok is false for Auto and for a
// value that names no algorithm.
func (a Algorithm) spec() (s schedule, ok bool) { return allReduceSchedule(a) }

// WithAlgorithm sets the AllReduce algorithm. An algorithm whose
// requirements the transport does not meet (Direct without shared memory)
// is an error at NewGroup, before any communication.
func WithAlgorithm(a Algorithm) GroupOption {
	return func(g *Group) { g.asked[KindAllReduce] = uint8(a) }
}

// Algorithms lists every algorithm, Auto first, for commands and tests
// to range over.
func Algorithms() []Algorithm {
	out := []Algorithm{Auto}
	for a := Algorithm(1); ; a++ {
		if _, ok := a.spec(); !ok {
			return out
		}
		out = append(out, a)
	}
}

func (a Algorithm) String() string {
	if a == Auto {
		return "auto"
	}
	if s, ok := a.spec(); ok {
		return s.name
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// AlgorithmNames is the list of algorithm names, comma-separated, for
// help texts and errors.
func AlgorithmNames() string {
	var names []string
	for _, a := range Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// ParseAlgorithm reads an algorithm's name (AlgorithmNames).
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if s == a.String() {
			return a, nil
		}
	}
	return Auto, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalid, s, AlgorithmNames())
}

// AlgorithmEnv is the environment variable that names the AllReduce
// algorithm for commands built on this package, like NCCL_ALGO.
const AlgorithmEnv = "RINGDDP_ALGO"
