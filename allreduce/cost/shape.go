package cost

// Shape is what a collective's cost depends on besides the model and the
// bytes: the ranks, how they sit on nodes, and what the transport offers.
type Shape struct {
	Ranks int
	// Nodes is the number of nodes, 1 when the topology is unknown;
	// LocalSize the largest node's number of ranks, SmallestNode the
	// smallest's (0: as LocalSize, even nodes).
	Nodes, LocalSize int
	SmallestNode     int
	// Topology: every rank knows its node (algorithms that need it can
	// run).
	Topology bool
	// PeerMemory: the ranks can read one another's buffers
	// (transport.PeerMemory), in place when LendLimit is 0 (ranks in one
	// address space), else as copies of at most LendLimit bytes lent in
	// shared memory (shm): the direct algorithm then runs segment by
	// segment, and its cost counts the copies and a wait per segment.
	PeerMemory bool
	LendLimit  int
	// Overlap: the transport carries a node's messages and the other
	// nodes' over separate endpoints (package mixed), so the topology
	// compositions overlap their blocks' phases within and between
	// nodes (allreduce's pipeline.go); without it their blocks run one
	// after the other.
	Overlap bool
}

// FlatShape is the shape of n ranks on one node.
func FlatShape(n int) Shape { return Shape{Ranks: n, Nodes: 1, LocalSize: n} }

// NodesShape is the shape of n ranks on nodes of localSize consecutive
// ranks (the last node smaller when localSize does not divide n).
func NodesShape(n, localSize int) Shape {
	if localSize <= 0 || localSize >= n {
		return Shape{Ranks: n, Nodes: 1, LocalSize: n, Topology: localSize > 0}
	}
	nodes := (n + localSize - 1) / localSize
	return Shape{Ranks: n, Nodes: nodes, LocalSize: localSize, SmallestNode: n - (nodes-1)*localSize, Topology: true}
}

// SlotsPerRank is the most slots (allreduce's hierarchy) a rank holds: ⌈L/L_min⌉
// on the smallest node, 1 on even nodes. Torus and mesh run that many
// inter-node all-reduces one after another there.
func (s Shape) SlotsPerRank() int {
	if s.SmallestNode <= 0 || s.SmallestNode >= s.LocalSize {
		return 1
	}
	return (s.LocalSize + s.SmallestNode - 1) / s.SmallestNode
}

// SmallestShape is the shape of the ranks of the smallest node.
func (s Shape) SmallestShape() Shape {
	l := s.SmallestNode
	if l <= 0 {
		l = s.LocalSize
	}
	return Shape{Ranks: l, Nodes: 1, LocalSize: l}
}

// LinkOf is the link a topology-blind algorithm pays on every step: the
// inter-node one once the group spans several nodes.
func (m Model) LinkOf(s Shape) Link {
	if s.Nodes > 1 {
		return m.Inter
	}
	return m.Intra
}

// Between is the link between ranks a and b of shape s, whose nodes are
// blocks of LocalSize consecutive ranks (as the simulator and
// inproc.WithLocalSize place them).
func (m Model) Between(s Shape, a, b int) Link {
	if s.Nodes > 1 && s.LocalSize > 0 && a/s.LocalSize != b/s.LocalSize {
		return m.Inter
	}
	return m.Intra
}

// IntraShape is the shape of the ranks of the largest node, InterShape
// that of one rank per node: the sub-groups of allreduce's compositions
// (hierarchical, torus, mesh).
func (s Shape) IntraShape() Shape { return Shape{Ranks: s.LocalSize, Nodes: 1, LocalSize: s.LocalSize} }

// InterShape is the shape of one rank per node (IntraShape).
func (s Shape) InterShape() Shape { return Shape{Ranks: s.Nodes, Nodes: s.Nodes, LocalSize: 1} }

// NodeOfRank is rank r's node on s: blocks of LocalSize consecutive ranks
// (as Between places them).
func (s Shape) NodeOfRank(r int) int {
	if s.Nodes <= 1 || s.LocalSize <= 0 {
		return 0
	}
	return min(r/s.LocalSize, s.Nodes-1)
}
