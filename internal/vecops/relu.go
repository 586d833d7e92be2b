package vecops

import "math"

// reluKernel is ReLU's forward pass on the first n - n%lanes elements.
type reluKernel[T Float] func(out, x *T, n int)

// reluGradKernel is ReLU's gradient on the first n - n%lanes elements.
type reluGradKernel[T Float] func(out, x, dy *T, n int)

// geZero is 1 when v ≥ 0 and 0 otherwise (NaN included), without a
// branch: the compiler turns the bool into a conditional move of the bits.
func geZero[T Float](v T) T {
	var bits uint64
	if v >= 0 {
		bits = 1
	}
	return T(math.Float64frombits(bits * math.Float64bits(1)))
}

// ReLU sets out[i] = x[i] · (x[i] ≥ 0 ? 1 : 0) for every element of x
// (out at least as long): the rectifier as a product by 1 or 0, so −0
// stays −0, a negative x gives −0, −Inf and NaN give NaN. Every variant
// gives the same bits.
func ReLU[T Float](v Variant, out, x []T) {
	n := len(x)
	out = out[:n]
	done := 0
	if k := kernelsOf[T](&v); k.relu != nil && n >= k.lanes {
		k.relu(&out[0], &x[0], n)
		done = n - n%k.lanes
	}
	out, x = out[done:], x[done:]
	for i, e := range x {
		out[i] = e * geZero(e)
	}
}

// ReLUGrad sets out[i] = dy[i] · (x[i] ≥ 0 ? 1 : 0) for every element of x
// (out and dy at least as long): ReLU's gradient, which passes NaN and
// ±Inf in dy where x ≥ 0 and turns them into NaN elsewhere. Every variant
// gives the same bits.
func ReLUGrad[T Float](v Variant, out, x, dy []T) {
	n := len(x)
	out, dy = out[:n], dy[:n]
	done := 0
	if k := kernelsOf[T](&v); k.reluGrad != nil && n >= k.lanes {
		k.reluGrad(&out[0], &x[0], &dy[0], n)
		done = n - n%k.lanes
	}
	out, x, dy = out[done:], x[done:], dy[done:]
	for i, e := range x {
		out[i] = dy[i] * geZero(e)
	}
}
