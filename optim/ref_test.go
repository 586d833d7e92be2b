package optim

import "math"

// Independent float64 reference implementations, transcribed line by line from
// the single-tensor code paths of torch.optim.SGD, torch.optim.Adam and
// torch.optim.AdamW (maximize=False, amsgrad=False). They allocate freely and
// share no code with the package.

type refSGD struct {
	lr, momentum, dampening, wd float64
	nesterov                    bool
	buf                         []float64 // nil until the first step ("None")
	steps                       int
}

func (r *refSGD) step(param, grad []float64) {
	for i := range param {
		d := grad[i]
		if r.wd != 0 {
			d = d + r.wd*param[i] // grad.add(param, alpha=weight_decay)
		}
		if r.momentum != 0 {
			if r.buf == nil {
				r.buf = make([]float64, len(param))
			}
			if r.first() {
				r.buf[i] = d // torch.clone(grad)
			} else {
				r.buf[i] = r.buf[i]*r.momentum + (1-r.dampening)*d // buf.mul_(momentum).add_(grad, alpha=1-dampening)
			}
			if r.nesterov {
				d = d + r.momentum*r.buf[i] // grad.add(buf, alpha=momentum)
			} else {
				d = r.buf[i]
			}
		}
		param[i] = param[i] + (-r.lr)*d // param.add_(grad, alpha=-lr)
	}
	r.steps++
}

func (r *refSGD) first() bool { return r.steps == 0 }

type refAdam struct {
	lr, beta1, beta2, eps, wd float64
	decoupled                 bool
	steps                     int
	expAvg, expAvgSq          []float64
}

func (r *refAdam) step(param, grad []float64) {
	if r.expAvg == nil {
		r.expAvg = make([]float64, len(param))
		r.expAvgSq = make([]float64, len(param))
	}
	r.steps++
	t := float64(r.steps)
	for i := range param {
		g := grad[i]
		if r.decoupled {
			param[i] = param[i] * (1 - r.lr*r.wd) // param.mul_(1 - lr*weight_decay)
		} else if r.wd != 0 {
			g = g + r.wd*param[i] // grad.add(param, alpha=weight_decay)
		}
		r.expAvg[i] = r.expAvg[i]*r.beta1 + (1-r.beta1)*g             // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
		r.expAvgSq[i] = r.expAvgSq[i]*r.beta2 + (1-r.beta2)*g*g       // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
		biasCorrection1 := 1 - math.Pow(r.beta1, t)                   // 1 - beta1 ** step
		biasCorrection2 := 1 - math.Pow(r.beta2, t)                   // 1 - beta2 ** step
		stepSize := r.lr / biasCorrection1                            // lr / bias_correction1
		biasCorrection2Sqrt := math.Sqrt(biasCorrection2)             // bias_correction2 ** 0.5
		denom := math.Sqrt(r.expAvgSq[i])/biasCorrection2Sqrt + r.eps // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
		param[i] = param[i] + (-stepSize)*(r.expAvg[i]/denom)         // param.addcdiv_(exp_avg, denom, value=-step_size)
	}
}
