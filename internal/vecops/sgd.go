package vecops

// SGD cases, the first index of kernels.sgd.
const (
	sgdPlain = iota
	sgdFirst
	sgdMomentum
)

// SGD is one step of stochastic gradient descent (torch.optim.SGD) in the
// element type of the parameters: the constants of the step, already
// rounded to T, and its switches. Its methods compute, per element i, with
// every operation rounded to T in this order (the scalar code, which
// converts every product to T so that no build fuses it into an FMA, not
// even with GOAMD64=v3):
//
//	gi := g[i]
//	if Decay { gi += WeightDecay * p[i] }
//	Plain:    (nothing)
//	First:    buf[i] = gi; if Nesterov { gi += Mom * gi }
//	Momentum: b := buf[i]*Mom + OneMinusDamp*gi; buf[i] = b
//	          if Nesterov { gi += Mom * b } else { gi = b }
//	p[i] += NegLR * gi
type SGD[T Float] struct {
	NegLR        T // -lr
	WeightDecay  T // read only when Decay
	Mom          T // momentum
	OneMinusDamp T // 1 - dampening
	Decay        bool
	Nesterov     bool
}

// Plain is the step without momentum: p += NegLR*g (after the weight
// decay). p and g have the same length; Nesterov is ignored.
func (s SGD[T]) Plain(v Variant, p, g []T) {
	p, g = p[:len(p)], g[:len(p)]
	done := s.vector(v, sgdPlain, p, g, nil)
	p, g = p[done:], g[done:]
	negLR, wd, decay := s.NegLR, s.WeightDecay, s.Decay
	for i := range p {
		gi := g[i]
		if decay {
			gi += T(wd * p[i])
		}
		p[i] += T(negLR * gi)
	}
}

// First is the first step with momentum: the momentum buffer buf takes the
// gradient. p, g and buf have the same length.
func (s SGD[T]) First(v Variant, p, g, buf []T) {
	p, g, buf = p[:len(p)], g[:len(p)], buf[:len(p)]
	done := s.vector(v, sgdFirst, p, g, buf)
	p, g, buf = p[done:], g[done:], buf[done:]
	negLR, wd, decay, mom, nesterov := s.NegLR, s.WeightDecay, s.Decay, s.Mom, s.Nesterov
	for i := range p {
		gi := g[i]
		if decay {
			gi += T(wd * p[i])
		}
		buf[i] = gi
		if nesterov {
			gi += T(mom * gi)
		}
		p[i] += T(negLR * gi)
	}
}

// Momentum is every later step with momentum. p, g and buf have the same
// length.
func (s SGD[T]) Momentum(v Variant, p, g, buf []T) {
	p, g, buf = p[:len(p)], g[:len(p)], buf[:len(p)]
	done := s.vector(v, sgdMomentum, p, g, buf)
	p, g, buf = p[done:], g[done:], buf[done:]
	negLR, wd, decay, mom, nesterov := s.NegLR, s.WeightDecay, s.Decay, s.Mom, s.Nesterov
	oneMinusDamp := s.OneMinusDamp
	for i := range p {
		gi := g[i]
		if decay {
			gi += T(wd * p[i])
		}
		b := T(buf[i]*mom) + T(oneMinusDamp*gi)
		buf[i] = b
		if nesterov {
			gi += T(mom * b)
		} else {
			gi = b
		}
		p[i] += T(negLR * gi)
	}
}

// vector runs v's kernel for the case on the whole vectors of p and
// returns how many elements it did (0 when v has no kernel for it).
func (s SGD[T]) vector(v Variant, kind int, p, g, buf []T) int {
	k := kernelsOf[T](&v)
	nest := s.Nesterov && kind != sgdPlain
	f := k.sgd[kind][b2i(s.Decay)][b2i(nest)]
	n := len(p)
	if f == nil || n < k.lanes {
		return 0
	}
	var b *T
	if buf != nil {
		b = &buf[0]
	}
	f(&p[0], &g[0], b, n, s.NegLR, s.WeightDecay, s.Mom, s.OneMinusDamp)
	return n - n%k.lanes
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
