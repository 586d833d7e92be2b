package allreduce

import (
	"context"
	"fmt"
	"github.com/ringddp/ringddp/allreduce/cost"
	"strings"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Algorithm selects how AllReduce runs.
type Algorithm uint8

// The AllReduce algorithms. Each has a file of its own with its schedule,
// steps and bytes on the wire, and one row in spec below; adding one is
// that file, a constant here and the row.
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

// requirement is what an algorithm needs of the group and its transport.
type requirement uint8

const (
	// needsPeerMemory: the transport's ranks share an address space
	// (transport.PeerMemory).
	needsPeerMemory requirement = 1 << iota
	// needsTopology: every rank knows its node (Topology): the transport
	// names it (inproc.WithLocalSize, tcp) or WithNode does.
	needsTopology
)

// algorithmSpec is one row of the algorithm table.
type algorithmSpec struct {
	name  string
	needs requirement
	run   func(g *Group, ctx context.Context, h transport.Header, c *call) error
	// cost is the predicted time in seconds of an AllReduce of the given
	// bytes (package cost), the schedule's; nil for Auto.
	cost func(m cost.Model, s cost.Shape, bytes float64) float64
	// work is the busiest node's work in seconds of one core, which the
	// cores bound divides (cost.Work); nil for Auto.
	work func(m cost.Model, s cost.Shape, bytes float64) float64
}

// predict is the algorithm's predicted time: its schedule's, raised to
// the cores bound of its work (cost.Work).
func (s algorithmSpec) predict(m cost.Model, sh cost.Shape, b float64) float64 {
	t := s.cost(m, sh, b)
	if m.Cores <= 0 {
		return t
	}
	return m.Bounded(t, s.work(m, sh, b), b)
}

// spec is the algorithm table: parsing, NewGroup's validation, the
// group's dispatch and Algorithms all read it, and nothing else knows the
// list. ok is false for a value that names no algorithm.
func (a Algorithm) spec() (s algorithmSpec, ok bool) {
	switch a {
	case Auto:
		return algorithmSpec{"auto", 0, (*Group).autoAllReduce, nil, nil}, true
	case Ring:
		return algorithmSpec{"ring", 0, (*Group).ringAllReduce, ringCost, ringWork}, true
	case Direct:
		return algorithmSpec{"direct", needsPeerMemory, (*Group).directAllReduce, directCost, directWork}, true
	case Doubling:
		return algorithmSpec{"doubling", 0, (*Group).doublingAllReduce, doublingCost, doublingWork}, true
	case Tree:
		return algorithmSpec{"tree", 0, (*Group).dtreeAllReduce, treeCost, treeWork}, true
	case HalvingDoubling:
		return algorithmSpec{"hd", 0, (*Group).hdAllReduce, hdCost, hdWork}, true
	case Hierarchical:
		return algorithmSpec{"hierarchical", needsTopology, (*Group).hierarchicalAllReduce, hierarchicalCost, hierarchicalWork}, true
	case Torus:
		return algorithmSpec{"torus", needsTopology, (*Group).torusAllReduce, torusCost, torusWork}, true
	case Mesh:
		return algorithmSpec{"mesh", needsTopology, (*Group).meshAllReduce, meshCost, meshWork}, true
	}
	return algorithmSpec{}, false
}

// Algorithms lists every algorithm, Auto first, for commands and tests
// to range over.
func Algorithms() []Algorithm {
	var out []Algorithm
	for a := Algorithm(0); ; a++ {
		if _, ok := a.spec(); !ok {
			return out
		}
		out = append(out, a)
	}
}

func (a Algorithm) String() string {
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

// AlgorithmFromEnv is the algorithm RINGDDP_ALGO names, Auto when it is
// unset or empty.
func AlgorithmFromEnv(getenv func(string) string) (Algorithm, error) {
	v := getenv(AlgorithmEnv)
	if v == "" {
		return Auto, nil
	}
	a, err := ParseAlgorithm(v)
	if err != nil {
		return Auto, fmt.Errorf("%s=%s: %w", AlgorithmEnv, v, err)
	}
	return a, nil
}

// checkAlgorithm is NewGroup's check that the group can run its
// algorithm: a clear error on every rank before any communication.
func (g *Group) checkAlgorithm() error {
	s, ok := g.algorithm.spec()
	if !ok {
		return fmt.Errorf("%w: unknown algorithm %v (want one of %s)", ErrInvalid, g.algorithm, AlgorithmNames())
	}
	if _, _, shared := PeerMemoryOf(g.conn); s.needs&needsPeerMemory != 0 && !shared {
		return fmt.Errorf("%w: algorithm %s needs a transport whose ranks can read one another's buffers (%T cannot)", ErrInvalid, s.name, g.conn)
	}
	if s.needs&needsTopology != 0 && g.node == "" {
		return fmt.Errorf("%w: algorithm %s needs to know which node each rank runs on (use inproc.WithLocalSize, tcp, or allreduce.WithNode)", ErrInvalid, s.name)
	}
	return nil
}

// autoAllReduce is Auto: the algorithm the cost model predicts fastest
// for this call's size class on this group's shape, chosen once per
// class (autoPick).
func (g *Group) autoAllReduce(ctx context.Context, h transport.Header, c *call) error {
	a, err := g.autoPick(ctx, len(c.buf))
	if err != nil {
		return err
	}
	spec, _ := a.spec()
	return spec.run(g, ctx, h, c)
}

// autoPick is Auto's algorithm for an AllReduce of the given bytes: the
// cached choice of its size class, or Choose's, made now. The first call
// of a group whose ranks know their nodes learns the topology (a nested
// all-gather, once per group), so that every rank chooses from the same
// shape.
func (g *Group) autoPick(ctx context.Context, bytes int) (Algorithm, error) {
	k := sizeClass(bytes)
	if a := g.picks[k]; a != Auto {
		return a, nil
	}
	s, err := g.costShape(ctx)
	if err != nil {
		return Auto, err
	}
	a := g.choose(s, classBytes(k))
	g.picks[k] = a
	return a, nil
}

// memoSharer is a transport whose ranks share one process and a memo of
// pure computations (transport.Memo, as package sim gives).
type memoSharer interface {
	SharedMemo() *transport.Memo
}

// choiceKey is everything Choose depends on.
type choiceKey struct {
	m     cost.Model
	s     cost.Shape
	bytes int
}

// choose is Choose for this group's model, worked out once for all the
// ranks of a process where the transport shares a memo (on the
// simulator's 1024 ranks Tree's formula alone takes seconds at 256 MiB).
func (g *Group) choose(s cost.Shape, bytes int) Algorithm {
	if ms, ok := g.rootConn().(memoSharer); ok {
		return ms.SharedMemo().Do(choiceKey{g.model, s, bytes}, func() any { return Choose(g.model, s, bytes) }).(Algorithm)
	}
	return Choose(g.model, s, bytes)
}

// Shape is the group's shape for the cost model (cost.Shape): its ranks;
// the nodes they sit on, with the largest and the smallest node's ranks,
// when the ranks know their nodes (learnt as Topology learns it: a
// collective every rank calls, once; it also spares Auto's first call
// learning it); and whether they share memory. Commands and packages that
// price the group's collectives ask it rather than derive it.
func (g *Group) Shape(ctx context.Context) (cost.Shape, error) {
	if g.node != "" {
		if _, err := g.Topology(ctx); err != nil {
			return cost.Shape{}, err
		}
	}
	return g.costShape(ctx)
}

// costShape is the group's shape for the cost model (Shape), learning the
// topology inside the collective that holds the turn.
func (g *Group) costShape(ctx context.Context) (cost.Shape, error) {
	g.seq.mu.Lock()
	known := g.shape
	g.seq.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	s := cost.FlatShape(g.size)
	if g.node != "" {
		topo, err := g.learnTopology(ctx)
		if err != nil {
			return cost.Shape{}, err
		}
		s = topo.shape()
	}
	s.PeerMemory, s.LendLimit = lending(g.conn)
	g.seq.mu.Lock()
	g.shape = &s
	g.seq.mu.Unlock()
	return s, nil
}

// shape is the cost model's cost.Shape of a topology.
func (t Topology) shape() cost.Shape {
	s := cost.Shape{Ranks: t.Size(), Nodes: t.Nodes(), Topology: true, SmallestNode: t.Size()}
	for k := range s.Nodes {
		s.LocalSize = max(s.LocalSize, len(t.Members(k)))
		s.SmallestNode = min(s.SmallestNode, len(t.Members(k)))
	}
	return s
}
