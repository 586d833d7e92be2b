package vecops

import "math"

// AdamDecay is how Adam applies weight decay.
type AdamDecay int

const (
	NoDecay        AdamDecay = iota // weight decay 0
	L2Decay                         // Adam: L2 added to the gradient
	DecoupledDecay                  // AdamW: the parameter shrinks before the update
)

// Adam is one step of Adam or AdamW (torch.optim.Adam/AdamW, amsgrad and
// maximize off) in the element type of the parameters: the constants of the
// step t, already rounded to T, and the weight decay's kind. Step computes,
// per element i, with every operation rounded to T in this order (the
// scalar code, which converts every product to T so that no build fuses it
// into an FMA):
//
//	pi, gi := p[i], g[i]
//	DecoupledDecay: pi *= DecayMul        L2Decay: gi += L2 * pi
//	mi := m[i]*B1 + OmB1*gi
//	vi := v[i]*B2 + OmB2*gi*gi
//	m[i], v[i] = mi, vi
//	denom := T(math.Sqrt(float64(vi)))/Bc2Sqrt + Eps
//	p[i] = pi + NegStep*(mi/denom)
//
// For float32 the square root computed in float64 and rounded to float32 is
// the correctly rounded float32 square root (53 ≥ 2·24 + 2 bits), which is
// what VSQRTPS computes.
type Adam[T Float] struct {
	NegStep  T // -lr / (1 - beta1^t)
	Bc2Sqrt  T // sqrt(1 - beta2^t)
	Eps      T
	B1, OmB1 T // beta1, 1 - beta1
	B2, OmB2 T // beta2, 1 - beta2
	DecayMul T // 1 - lr*weight_decay, read only with DecoupledDecay
	L2       T // weight_decay, read only with L2Decay
	Decay    AdamDecay
}

// Step updates p, the first moment m and the second moment v (all as long
// as p) from the gradient g.
func (a Adam[T]) Step(v Variant, p, g, m, vs []T) {
	n := len(p)
	p, g, m, vs = p[:n], g[:n], m[:n], vs[:n]
	done := 0
	if k := kernelsOf[T](&v); k.adam[a.Decay] != nil && n >= k.lanes {
		k.adam[a.Decay](&p[0], &g[0], &m[0], &vs[0], n, a.NegStep, a.Bc2Sqrt, a.Eps, a.B1, a.OmB1, a.B2, a.OmB2, a.DecayMul, a.L2)
		done = n - n%k.lanes
	}
	a.scalar(p[done:], g[done:], m[done:], vs[done:])
}

func (a Adam[T]) scalar(p, g, m, v []T) {
	p, g, m, v = p[:len(p)], g[:len(p)], m[:len(p)], v[:len(p)]
	var (
		negStep, bc2Sqrt, eps = a.NegStep, a.Bc2Sqrt, a.Eps
		b1, omb1, b2, omb2    = a.B1, a.OmB1, a.B2, a.OmB2
		decayMul, l2          = a.DecayMul, a.L2
		decayOn               = a.Decay != NoDecay
		decoupled             = a.Decay == DecoupledDecay
	)
	for i := range p {
		pi, gi := p[i], g[i]
		if decayOn {
			if decoupled {
				pi *= decayMul
			} else {
				gi += T(l2 * pi)
			}
		}
		mi := T(m[i]*b1) + T(omb1*gi)
		vi := T(v[i]*b2) + T(omb2*gi*gi)
		m[i], v[i] = mi, vi
		denom := T(math.Sqrt(float64(vi)))/bc2Sqrt + eps
		p[i] = pi + T(negStep*(mi/denom))
	}
}
