package allreduce

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestPipelineTimeClosedForms checks pipelineTime's recurrence (the
// schedule of pipeline.go) against the closed forms of its doc comment:
// the sum for one block or no overlap, I + B·A + O where the inter-node
// stage is the bottleneck, B·(I+O) + max(A, O) − O where the node's work
// is.
func TestPipelineTimeClosedForms(t *testing.T) {
	near := func(want, got float64, what string) {
		t.Helper()
		require.InDelta(t, want, got, 1e-12*math.Max(1, want), what)
	}
	for _, c := range []struct{ i, a, o float64 }{
		{1, 10, 2}, {3, 3, 0}, {0, 5, 0}, {2, 1, 3}, {5, 2, 1}, {1, 2.5, 1}, {2, 4, 2},
	} {
		near(c.i+c.a+c.o, pipelineTime(1, true, c.i, c.a, c.o), "one block")
		for _, b := range []int{2, 3, 8} {
			near(float64(b)*(c.i+c.a+c.o), pipelineTime(b, false, c.i, c.a, c.o), "no overlap")
			got := pipelineTime(b, true, c.i, c.a, c.o)
			switch {
			case c.a >= c.i+c.o:
				near(c.i+float64(b)*c.a+c.o, got, "link-bound")
			case c.a <= c.i+c.o && c.a <= c.i:
				near(float64(b)*(c.i+c.o)+math.Max(c.a, c.o)-c.o, got, "node-bound")
			}
			require.LessOrEqual(t, got, float64(b)*(c.i+c.a+c.o)+1e-12, "never slower than one after the other")
			require.GreaterOrEqual(t, got, math.Max(float64(b)*c.a, float64(b)*(c.i+c.o))-1e-12, "never faster than its busiest goroutine")
		}
	}
}

// TestPipelinedCompositionsDecide: on 2 nodes × 2 ranks whose nodes share
// one 1 Gbit/s NIC, the compositions priced pipelined (Shape.Overlap, the
// mixed transport) come within 2% of the floor's time at 64 MiB, as they
// run on the test bed (docs/testbed.md), and Auto's pick at 16 MiB moves
// from halving-doubling (one after the other, the compositions pay their
// intra-node phases on top of the link's time) to torus; below one block
// (4 MiB) nothing changes.
func TestPipelinedCompositionsDecide(t *testing.T) {
	m := cost.DefaultModelFor(cost.Shape{PeerMemory: true, LendLimit: 1 << 20})
	m.Inter, m.NICs = cost.Link{Alpha: 100e-6, Beta: 8e-9}, 1
	apart, overlapped := cost.NodesShape(4, 2), cost.NodesShape(4, 2)
	overlapped.Overlap = true
	floor := InterNodeFloor(overlapped, 64<<20) * m.Inter.Beta
	for _, a := range []Algorithm{Hierarchical, Torus} {
		p, ok := PredictAlgorithm(m, overlapped, a, 64<<20)
		require.True(t, ok)
		require.InDelta(t, 1, p/floor, 0.02, "%s at 64 MiB: %.1f ms against the floor's %.1f ms", a, p*1e3, floor*1e3)
		q, _ := PredictAlgorithm(m, apart, a, 64<<20)
		require.Greater(t, q, p*1.03, "%s: blocks one after the other cost more", a)
		small, _ := PredictAlgorithm(m, overlapped, a, 2<<20)
		same, _ := PredictAlgorithm(m, apart, a, 2<<20)
		require.Equal(t, same, small, "%s: one block, nothing to overlap", a)
	}
	require.Equal(t, HalvingDoubling, Algorithm(decideRow(m, apart, KindAllReduce, 16<<20)))
	require.Equal(t, Torus, Algorithm(decideRow(m, overlapped, KindAllReduce, 16<<20)))
	require.Equal(t, decideRow(m, apart, KindAllReduce, 1<<20), decideRow(m, overlapped, KindAllReduce, 1<<20))
}
