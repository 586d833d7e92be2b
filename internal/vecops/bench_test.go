package vecops

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// benchLen is about the MLP's parameter count (784·256 + 256·128 + 128·10
// weights and biases): the optimizers' slices at every step.
const benchLen = 235146

// benchBatchBytes is one batch of 256 MNIST images: what FillBatch converts
// at every step.
const benchBatchBytes = 256 * 784

// ordinary returns n normally distributed values: no denormals, whose
// arithmetic takes microcode assists on some CPUs and would time those.
func ordinary[T Float](rng *rand.Rand, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = T(rng.NormFloat64())
	}
	return out
}

// benchKernel times step with each variant this CPU runs (RINGDDP_VECOPS
// does not apply) and reports elements/s and the bytes moved per second.
func benchKernel(b *testing.B, n, bytesPerElem int, step func(v Variant)) {
	for _, v := range Variants() {
		b.Run(v.Name, func(b *testing.B) {
			b.SetBytes(int64(n * bytesPerElem))
			for b.Loop() {
				step(v)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

func benchSGD[T Float](b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	p, g, buf := ordinary[T](rng, benchLen), ordinary[T](rng, benchLen), ordinary[T](rng, benchLen)
	size := int(unsafe.Sizeof(p[0]))
	for _, s := range sgdCases[T]()[:4] { // the usual constants
		name := fmt.Sprintf("decay=%v/nesterov=%v", s.Decay, s.Nesterov)
		// p and buf read and written, g read.
		b.Run("Momentum/"+name, func(b *testing.B) {
			benchKernel(b, benchLen, 5*size, func(v Variant) { s.Momentum(v, p, g, buf) })
		})
	}
	s := sgdCases[T]()[0]
	b.Run("Plain", func(b *testing.B) { benchKernel(b, benchLen, 3*size, func(v Variant) { s.Plain(v, p, g) }) })
}

// BenchmarkSGD times SGD's later steps (every weight-decay and Nesterov
// case) and the step without momentum.
func BenchmarkSGD(b *testing.B) {
	b.Run("float32", benchSGD[float32])
	b.Run("float64", benchSGD[float64])
}

func benchAdam[T Float](b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 1))
	p, g, m, vs := ordinary[T](rng, benchLen), ordinary[T](rng, benchLen), ordinary[T](rng, benchLen), ordinary[T](rng, benchLen)
	for i := range vs {
		vs[i] *= vs[i] // a second moment is not negative
	}
	size := int(unsafe.Sizeof(p[0]))
	for _, d := range []AdamDecay{NoDecay, L2Decay, DecoupledDecay} {
		a := Adam[T]{NegStep: -1e-3, Bc2Sqrt: 0.03, Eps: 1e-8, B1: 0.9, OmB1: 0.1, B2: 0.999, OmB2: 0.001, DecayMul: 0.99999, L2: 0.01, Decay: d}
		// p, m and v read and written, g read.
		b.Run(fmt.Sprintf("decay=%d", d), func(b *testing.B) {
			benchKernel(b, benchLen, 7*size, func(v Variant) { a.Step(v, p, g, m, vs) })
		})
	}
}

// BenchmarkAdam times Adam's step with each kind of weight decay.
func BenchmarkAdam(b *testing.B) {
	b.Run("float32", benchAdam[float32])
	b.Run("float64", benchAdam[float64])
}

func benchLUT[T Float](b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 1))
	src := make([]byte, benchBatchBytes)
	for i := range src {
		src[i] = byte(rng.IntN(256))
	}
	dst, table := make([]T, benchBatchBytes), new([256]T)
	copy(table[:], ordinary[T](rng, 256))
	size := int(unsafe.Sizeof(dst[0]))
	// One image at a time, as FillBatch converts them.
	benchKernel(b, benchBatchBytes, 1+size, func(v Variant) {
		for i := 0; i < benchBatchBytes; i += 784 {
			LUT(v, dst[i:i+784], src[i:i+784], table)
		}
	})
}

// BenchmarkLUT times the conversion of one batch of MNIST images (the
// table in the cache, the batch in L2 or beyond).
func BenchmarkLUT(b *testing.B) {
	b.Run("float32", benchLUT[float32])
	b.Run("float64", benchLUT[float64])
}
