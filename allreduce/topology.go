package allreduce

import (
	"context"
	"fmt"
	"hash/fnv"
)

// nodeNamer is what a transport may say about where its rank runs: the
// name of its node (host), the same for every rank on one node, "" when it
// does not know. inproc (with a simulated topology) and tcp offer it.
type nodeNamer interface{ NodeName() string }

// WithNode names this rank's node for Topology, overriding what the
// transport says: ranks passing the same name are on one node.
func WithNode(name string) GroupOption { return func(g *Group) { g.node = name } }

// Topology is where a group's ranks run: which node (host) each is on.
// Nodes are numbered 0, 1, ... in the order of their lowest rank; a
// node's local ranks are its ranks in rank order. Nodes may differ in
// size.
type Topology struct {
	node []int // node index of each rank
}

// Size is the number of ranks.
func (t Topology) Size() int { return len(t.node) }

// Node is the node index of rank r.
func (t Topology) Node(r int) int { return t.node[r] }

// Nodes is the number of nodes.
func (t Topology) Nodes() int {
	n := 0
	for _, x := range t.node {
		n = max(n, x+1)
	}
	return n
}

// Members lists the ranks on node k, in rank order.
func (t Topology) Members(k int) []int {
	var out []int
	for r, x := range t.node {
		if x == k {
			out = append(out, r)
		}
	}
	return out
}

// LocalRank is rank r's index among its node's ranks.
func (t Topology) LocalRank(r int) int {
	l := 0
	for q := 0; q < r; q++ {
		if t.node[q] == t.node[r] {
			l++
		}
	}
	return l
}

// LocalSize is the number of ranks on rank r's node.
func (t Topology) LocalSize(r int) int { return len(t.Members(t.node[r])) }

// String renders the node sizes, e.g. "3 nodes: 3,3,1".
func (t Topology) String() string {
	s := fmt.Sprintf("%d nodes: ", t.Nodes())
	for k := range t.Nodes() {
		if k > 0 {
			s += ","
		}
		s += fmt.Sprint(len(t.Members(k)))
	}
	return s
}

// topologyFromKeys numbers the nodes of per-rank node keys by first
// appearance.
func topologyFromKeys(keys []int64) Topology {
	t := Topology{node: make([]int, len(keys))}
	index := map[int64]int{}
	for r, k := range keys {
		i, ok := index[k]
		if !ok {
			i = len(index)
			index[k] = i
		}
		t.node[r] = i
	}
	return t
}

// nodeKey is the hash of a node name every rank contributes.
func nodeKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// Topology learns which node every rank of g runs on: a collective (every
// rank calls it) that all-gathers the node names (WithNode, or the
// transport's) the first time and returns the cached result after. It
// fails on every rank, before any communication, where this rank's node
// is unknown.
func (g *Group) Topology(ctx context.Context) (Topology, error) {
	return g.topology(ctx, g.do)
}

// topology is Topology with the all-gather run by run: g.do for a call
// of its own, g.nested inside an algorithm that holds the turn.
func (g *Group) topology(ctx context.Context, run func(context.Context, *call) error) (Topology, error) {
	g.seq.mu.Lock()
	t := g.topo
	g.seq.mu.Unlock()
	if t != nil {
		return *t, nil
	}
	if g.node == "" {
		return Topology{}, fmt.Errorf("%w: rank %d does not know its node (use a transport that does, e.g. inproc.WithLocalSize or tcp, or allreduce.WithNode)", ErrInvalid, g.worldRank)
	}
	keys := make([]int64, g.size)
	mine := []int64{nodeKey(g.node)}
	c := call{kind: KindAllGather, dt: Int64, root: -1, count: g.size, buf: asBytes(keys), src: asBytes(mine)}
	if err := run(ctx, &c); err != nil {
		return Topology{}, err
	}
	topo := topologyFromKeys(keys)
	g.seq.mu.Lock()
	g.topo = &topo
	g.seq.mu.Unlock()
	return topo, nil
}
