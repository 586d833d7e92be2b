package allreduce

import "github.com/ringddp/ringddp/allreduce/cost"

// sideBySideCost is the time of the inter-node all-reduces of c bytes
// each that l ranks of every node of shape s run at once (torus: c =
// M/L; mesh: c = M): where the model has the measured ratio for l rings
// (cost.SideBySide), that ratio times Auto's all-reduce of l·c bytes
// among one rank per node over the inter-node link alone (one ring of
// the same bytes in all, as hierarchical's inter-node phase is priced);
// else Auto's all-reduce of c bytes over the link shared by the l rings
// (cost.Model.SharedBy).
func sideBySideCost(m cost.Model, s cost.Shape, l int, c float64) float64 {
	if r, ok := m.SideBySideRatio(l); ok {
		return r * autoCost(m, s.InterShape(), float64(l)*c)
	}
	return autoCost(m.SharedBy(l), s.InterShape(), c)
}
