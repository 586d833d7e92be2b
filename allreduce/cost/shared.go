package cost

import (
	"fmt"
	"math"
)

// Rings side by side: torus's inter-node phase is L ring all-reduces
// between nodes at once, one per local rank (local rank i of every node),
// each of M/L, through each node's one link; mesh's is L of M each;
// hierarchical's is one ring of M. Two ways to price them:
//
//   - SharedBy: each ring over the inter-node link shared ⌈L/NICs⌉ ways
//     (Link.Shared: the NIC carries the rings' messages back to back and
//     never idles, so each step's α hides behind the other rings'
//     bytes). Every model without SideBySide, and every profile written
//     before it existed, prices them so.
//   - SideBySide, where measured for L rings: the L rings of x bytes each
//     take Ratio times one ring of L·x, the same bytes through each
//     node's link. cmd/bench -calibrate across nodes times both as the
//     compositions run them (ring all-reduces of lock-step pieces,
//     reduce-scatter steps reducing) and stores the ratio; allreduce's
//     compositions price their inter-node phases by it (sideBySideCost).

// SideBySide is the measured cost of Rings ring all-reduces between nodes
// run at once by every node's Rings ranks, each of x bytes, as Ratio
// times the time of one ring all-reduce of Rings·x among one rank per
// node (Rings ≥ 2, Ratio > 0; the zero value: not measured). With one
// NIC a node, 1 says the rings share its link without loss or gain
// beyond the bytes; above 1, they lose to it (flows the link does not
// serve evenly, each lock-step ring waiting for its slowest); about
// 1/Rings, each rank has a link of its own.
type SideBySide struct {
	Rings int     `json:"rings"`
	Ratio float64 `json:"ratio"`
}

// SideBySideRatio is the measured ratio (SideBySide) of l rings side by
// side, ok false where the model has none for l rings.
func (m Model) SideBySideRatio(l int) (ratio float64, ok bool) {
	if l < 2 || m.SideBySide.Rings != l {
		return 0, false
	}
	return m.SideBySide.Ratio, true
}

// validate reports a SideBySide that is neither unset nor of at least 2
// rings and a finite ratio above 0.
func (s SideBySide) validate() error {
	if s == (SideBySide{}) {
		return nil
	}
	if s.Rings < 2 || !(s.Ratio > 0) || math.IsInf(s.Ratio, 1) {
		return fmt.Errorf("%w: cost model side_by_side = %d rings, ratio %v: want at least 2 rings and a finite ratio > 0 (or neither: not measured)", ErrInvalid, s.Rings, s.Ratio)
	}
	return nil
}
