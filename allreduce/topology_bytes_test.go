package allreduce_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// crossCounter is an in-process rank that counts the payload bytes it
// sends to ranks of other nodes (nodes of localSize consecutive ranks, as
// inproc.WithLocalSize makes them). It offers no Exchange, so every
// message goes through Send, and Send returns once the message is sent.
type crossCounter struct {
	transport.Conn
	localSize int
	sent      atomic.Int64
}

func (c *crossCounter) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if to/c.localSize != c.Rank()/c.localSize {
		c.sent.Add(int64(len(p)))
	}
	return c.Conn.Send(ctx, to, h, p)
}

func (c *crossCounter) NodeName() string {
	return c.Conn.(interface{ NodeName() string }).NodeName()
}

func (c *crossCounter) Abort(cause error) { c.Conn.(transport.Aborter).Abort(cause) }

// ringSends is the elements member j of a ring all-reduce of count
// elements among k ranks sends (ring.go): every chunk but its own in the
// reduce-scatter, every chunk but its right neighbour's in the
// all-gather.
func ringSends(count, k, j int) int {
	if k == 1 {
		return 0
	}
	lo, hi := allreduce.ChunkBounds(count, k, j)
	rlo, rhi := allreduce.ChunkBounds(count, k, (j+1)%k)
	return 2*count - (hi - lo) - (rhi - rlo)
}

// interNodeFormula is the elements node j of k nodes (the largest of l
// ranks) sends to other nodes in one all-reduce of count elements by
// algo, its inter-node all-reduces going by the ring:
//
//   - hierarchical: the local root's ring of each block;
//   - torus: the ring of each slot's chunk of each block, one holder of
//     each slot on every node, so all l of them from node j;
//   - mesh: l rings of the whole buffer, one per slot.
func interNodeFormula(algo allreduce.Algorithm, count, es, k, l, j int) int {
	blocks := allreduce.PipelineBlocks(count * es)
	total := 0
	switch algo {
	case allreduce.Mesh:
		return l * ringSends(count, k, j)
	case allreduce.Hierarchical:
		for b := range blocks {
			lo, hi := allreduce.ChunkBounds(count, blocks, b)
			total += ringSends(hi-lo, k, j)
		}
	case allreduce.Torus:
		for b := range blocks {
			lo, hi := allreduce.ChunkBounds(count, blocks, b)
			for s := range l {
				clo, chi := allreduce.ChunkBounds(hi-lo, l, s)
				total += ringSends(chi-clo, k, j)
			}
		}
	}
	return total
}

// Each topology-aware algorithm sends between nodes exactly the bytes its
// formula says (interNodeFormula, the doc comments of hierarchical.go,
// torus.go and mesh.go): hierarchical and torus 2(K-1)/K·M from each node
// — the fewest an all-reduce can — and mesh L times that, on even and
// uneven nodes, at a count that splits unevenly and at one of two
// pipeline blocks. The cost model here makes the inter-node all-reduces
// the ring's (on 2 nodes every bandwidth-optimal all-reduce sends M).
func TestTopologyAlgorithmsInterNodeBytes(t *testing.T) {
	m := cost.Model{Intra: cost.Link{Alpha: 1e-9, Beta: 1e-10}, Inter: cost.Link{Alpha: 1e-9, Beta: 1e-8}, Gamma: 1e-11}
	counts := []int{100003}
	if !testing.Short() {
		counts = append(counts, (8<<20)/4+3) // two blocks of float32
	}
	for _, layout := range []struct{ n, l int }{{4, 2}, {6, 2}, {6, 3}, {5, 2}, {7, 3}} {
		k := (layout.n + layout.l - 1) / layout.l
		if k > 2 {
			require.Equal(t, allreduce.Ring, allreduce.Choose(m, cost.Shape{Ranks: k, Nodes: k, LocalSize: 1}, 4096),
				"the model's inter-node all-reduce on %d nodes", k)
		}
		for _, algo := range topologyAlgorithms {
			for _, count := range counts {
				t.Run(fmt.Sprintf("%v/%d×%d/%d", algo, layout.n, layout.l, count), func(t *testing.T) {
					conns, _, err := allreducetest.InprocConns(layout.n, 30*time.Second, inproc.WithLocalSize(layout.l))
					require.NoError(t, err)
					counted := make([]transport.Conn, len(conns))
					for r, c := range conns {
						counted[r] = &crossCounter{Conn: c, localSize: layout.l}
					}
					// The first call learns the topology (an all-gather);
					// each rank counts what it sends in the second.
					second := make([]int64, layout.n)
					errs := allreducetest.RunRanks(counted, func(g *allreduce.Group) error {
						buf := make([]float32, count)
						c := counted[g.Rank()].(*crossCounter)
						if err := allreduce.AllReduce(context.Background(), g, buf, allreduce.Sum); err != nil {
							return err
						}
						first := c.sent.Load()
						if err := allreduce.AllReduce(context.Background(), g, buf, allreduce.Sum); err != nil {
							return err
						}
						second[g.Rank()] = c.sent.Load() - first
						return nil
					}, allreduce.WithAlgorithm(algo), allreduce.WithModel(m))
					for r, err := range errs {
						require.NoError(t, err, "rank %d", r)
					}
					for j := range k {
						var got int64
						for r := j * layout.l; r < min(layout.n, (j+1)*layout.l); r++ {
							got += second[r]
						}
						want := 4 * interNodeFormula(algo, count, 4, k, layout.l, j)
						require.EqualValues(t, want, got, "node %d of %d: bytes sent to other nodes", j, k)
					}
				})
			}
		}
	}
}
