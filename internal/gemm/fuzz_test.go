package gemm

import (
	"github.com/ringddp/ringddp/internal/cpuvariant"
	"math/rand/v2"
	"testing"
)

// FuzzGemm runs random shapes, strides, transposes, scalars and thread
// counts through every variant this CPU runs and compares with the
// float64 reference.
func FuzzGemm(f *testing.F) {
	f.Add(uint8(13), uint8(17), uint8(19), uint8(0), uint8(1), uint64(1))
	f.Add(uint8(1), uint8(1), uint8(0), uint8(3), uint8(2), uint64(2))
	f.Add(uint8(40), uint8(70), uint8(255), uint8(2), uint8(0), uint64(3))
	f.Fuzz(func(t *testing.T, m, n, k, flags, pad uint8, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tA, tB := transposes[flags&1], transposes[flags>>1&1]
		alphas := []float64{1, -2.5, 0, 0.75}
		betas := []float64{0, 1, 0.5, -3}
		alpha, beta := alphas[flags>>2&3], betas[flags>>4&3]
		threads := 1 + int(flags>>6)
		cl := newCall(rng, tA, tB, int(m), int(n), int(k), int(pad%5), alpha, beta)
		for _, v := range cpuvariant.Runnable(assemblyVariants()) {
			want, tol := cl.reference(eps64)
			compare(t, v.Name+" d", packedD(v, threads, cl), want, tol)
			c32 := cl
			c32.a, c32.b, c32.c = append([]float64(nil), cl.a...), append([]float64(nil), cl.b...), append([]float64(nil), cl.c...)
			c32.to32Exact()
			want, tol = c32.reference(eps32)
			compare(t, v.Name+" s", packedS(v, threads, c32), want, tol)
		}
	})
}
