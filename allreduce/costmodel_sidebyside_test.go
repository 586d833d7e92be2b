package allreduce

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestSideBySidePricing: a model with the measured ratio of L rings side
// by side (cost.SideBySide) prices torus's inter-node phase at the ratio
// times Auto's all-reduce of the block's M among one rank per node, and
// mesh's at it times the all-reduce of L·M: the price moves by exactly
// the change of the ratio times that (once per block where the link is
// the bottleneck: I + B·A + O). A ratio measured for another number of
// rings, and a model without one, price as the link shared by the NICs
// (SharedBy), as before the ratio existed.
func TestSideBySidePricing(t *testing.T) {
	m := cost.DefaultModelFor(cost.Shape{PeerMemory: true, LendLimit: 1 << 20})
	m.Inter, m.NICs = cost.Link{Alpha: 50e-6, Beta: 8e-9}, 1
	s := overlappedShape(6, 2)
	inter := s.InterShape()
	with := func(rings int, ratio float64) cost.Model {
		w := m
		w.SideBySide = cost.SideBySide{Rings: rings, Ratio: ratio}
		require.NoError(t, w.Validate())
		return w
	}
	near := func(want, got float64, what string) {
		t.Helper()
		require.InDelta(t, want, got, 1e-9*math.Max(want, 1e-3), what)
	}
	for _, b := range []int{256 << 10, 2 << 20, 4 << 20, 16 << 20, 64 << 20} {
		blocks := pipelinedBlocks(s, float64(b))
		block := float64(b) / float64(blocks)
		old := torusCost(m, s, float64(b))
		near(old, torusCost(with(3, 1.5), s, float64(b)), "a ratio of 3 rings on nodes of 2")
		one := autoCost(m, inter, block) // one ring of the block's M
		lo, hi := torusCost(with(2, 1), s, float64(b)), torusCost(with(2, 1.25), s, float64(b))
		near(float64(blocks)*0.25*one, hi-lo, "torus: the ratio's change times one ring of M per block")
		// Ratio 1 against the shared link: the shared link hides the
		// steps' α behind the other ring's bytes; the ratio 1 does not.
		require.Greater(t, lo, old, "ratio 1 at %d bytes: one ring's latency, which the shared link hides", b)

		meshOld := meshCost(m, s, float64(b))
		near(meshOld, meshCost(with(4, 2), s, float64(b)), "mesh: a ratio of 4 rings on nodes of 2")
		near(0.25*autoCost(m, inter, 2*float64(b)), meshCost(with(2, 1.25), s, float64(b))-meshCost(with(2, 1), s, float64(b)),
			"mesh: the ratio's change times one ring of L·M")
	}
	// Hierarchical runs one ring between nodes: no ratio moves it.
	require.Equal(t, hierarchicalCost(m, s, 4<<20), hierarchicalCost(with(2, 1.3), s, 4<<20))
}

// overlappedShape is cost.NodesShape over the mixed transport (the
// compositions' blocks overlapped, as on the test bed).
func overlappedShape(n, local int) cost.Shape {
	s := cost.NodesShape(n, local)
	s.Overlap = true
	return s
}
