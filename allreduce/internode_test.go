package allreduce_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// countingConn counts the bytes its rank sends to ranks of other nodes
// (nodes of local consecutive ranks).
type countingConn struct {
	transport.Conn
	local int
	sent  *atomic.Int64
}

func (c countingConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if to/c.local != c.Rank()/c.local {
		c.sent.Add(int64(len(p)))
	}
	return c.Conn.Send(ctx, to, h, p)
}

// The inter-node bytes table (InterNodeBytes) against what the
// algorithms send: run in process on nodes of L consecutive ranks, every
// send to another node's rank counted at the transport, the busiest
// node's and rank's bytes are the table's (within 0.2%: the group's
// learning of its topology sends a few bytes between nodes too, and
// chunks are whole elements).
func TestInterNodeBytesTable(t *testing.T) {
	for _, c := range []struct {
		n, l  int
		algos []allreduce.Algorithm
	}{
		{4, 2, []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.HalvingDoubling, allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}},
		{8, 4, []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.HalvingDoubling, allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}},
		{8, 2, []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.HalvingDoubling}},
		{6, 3, []allreduce.Algorithm{allreduce.Ring, allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}},
	} {
		s := cost.NodesShape(c.n, c.l)
		count := 1 << 16
		for _, a := range c.algos {
			t.Run(fmt.Sprintf("%dx%d/%v", s.Nodes, c.l, a), func(t *testing.T) {
				perNode, perRank, ok := allreduce.InterNodeBytes(a, s, count*4)
				if !ok {
					t.Fatalf("not in the table")
				}
				sent := make([]atomic.Int64, c.n)
				inner := allreducetest.Inproc(20*time.Second)(t, c.n)
				groups := make([]*allreduce.Group, c.n)
				errs := make([]error, c.n)
				var wg sync.WaitGroup
				for r := range c.n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						conn := countingConn{Conn: inner[r], local: c.l, sent: &sent[r]}
						groups[r], errs[r] = allreduce.NewGroup(conn, allreduce.WithAlgorithm(a), allreduce.WithNode(fmt.Sprint("node", r/c.l)))
					}()
				}
				wg.Wait()
				if err := allreducetest.FirstError(errs); err != nil {
					t.Fatal(err)
				}
				if err := allreducetest.FirstError(allreducetest.RunGroups(groups, func(g *allreduce.Group) error {
					return allreduce.AllReduce(context.Background(), g, make([]float32, count), allreduce.Sum)
				})); err != nil {
					t.Fatal(err)
				}
				node := make([]float64, s.Nodes)
				rank := 0.0
				for r := range c.n {
					x := float64(sent[r].Load())
					node[r/c.l] += x
					rank = math.Max(rank, x)
				}
				busiest := 0.0
				for _, x := range node {
					busiest = math.Max(busiest, x)
				}
				if math.Abs(busiest-perNode) > 2e-3*perNode || math.Abs(rank-perRank) > 2e-3*perRank { // the topology's learning and chunks rounded to elements: a few bytes
					t.Errorf("sent between nodes: %v B from the busiest node, %v B from the busiest rank; the table says %v, %v", busiest, rank, perNode, perRank)
				}
			})
		}
	}
}

// A profile whose link between nodes is slow makes Auto prefer the
// algorithm that sends fewer bytes between nodes: on layouts of 2 to 8
// nodes, at large sizes, with the two links equal Auto may pick any
// algorithm; with the inter-node link a hundred times slower (one NIC a
// node) it picks one that sends no more between nodes than that one, and
// the floor's bytes (2(K-1)/K·M a node) where the table gives its pick.
func TestSlowInterLinkPicksFewerInterBytes(t *testing.T) {
	fast := cost.Link{Alpha: 20e-6, Beta: 1 / 2e9}
	for _, c := range []struct{ n, l int }{{4, 2}, {8, 4}, {8, 2}, {16, 4}, {6, 2}, {6, 3}, {32, 4}} {
		s := cost.NodesShape(c.n, c.l)
		equal := cost.Model{Intra: fast, Inter: fast, Gamma: 1 / 8e9, Ports: 2, NICs: 1}
		slow := equal
		slow.Inter = cost.Link{Alpha: 60e-6, Beta: 100 * fast.Beta}
		for _, bytes := range []int{16 << 20, 64 << 20} {
			before, after := allreduce.Choose(equal, s, bytes), allreduce.Choose(slow, s, bytes)
			t.Logf("%d nodes of %d, %d B: equal links %v, slow inter-node link %v", s.Nodes, c.l, bytes, before, after)
			got, _, ok := allreduce.InterNodeBytes(after, s, bytes)
			if !ok {
				t.Errorf("%d nodes of %d, %d B: with a slow inter-node link Auto picks %v, which the table does not give", s.Nodes, c.l, bytes, after)
				continue
			}
			if was, _, ok := allreduce.InterNodeBytes(before, s, bytes); ok && got > was {
				t.Errorf("%d nodes of %d, %d B: Auto's pick %v sends %v B from a node, more than %v's %v with equal links", s.Nodes, c.l, bytes, after, got, before, was)
			}
			if floor := allreduce.InterNodeFloor(s, bytes); got > floor*(1+1e-9) {
				t.Errorf("%d nodes of %d, %d B: Auto's pick %v sends %v B from a node, above the floor %v", s.Nodes, c.l, bytes, after, got, floor)
			}
		}
	}
}
