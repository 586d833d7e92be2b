package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
)

// benchShapes are the MLP's products at batch 256 (forward, and the two
// backward products of each layer) and squares.
var benchShapes = []struct {
	name    string
	tA, tB  blas.Transpose
	m, n, k int
}{
	{"mlp1-fwd", blas.NoTrans, blas.NoTrans, 256, 256, 784},
	{"mlp1-dW", blas.Trans, blas.NoTrans, 784, 256, 256},
	{"mlp1-dX", blas.NoTrans, blas.Trans, 256, 784, 256},
	{"mlp2-fwd", blas.NoTrans, blas.NoTrans, 256, 128, 256},
	{"mlp2-dW", blas.Trans, blas.NoTrans, 256, 128, 256},
	{"mlp2-dX", blas.NoTrans, blas.Trans, 256, 256, 128},
	{"sq512", blas.NoTrans, blas.NoTrans, 512, 512, 512},
	{"sq1024", blas.NoTrans, blas.NoTrans, 1024, 1024, 1024},
	{"sq2048", blas.NoTrans, blas.NoTrans, 2048, 2048, 2048},
}

// BenchmarkSgemm times one thread of each variant this CPU runs at each
// shape and reports GFLOP/s (2·m·n·k per product). RINGDDP_GEMM does not
// apply: every variant runs.
func BenchmarkSgemm(b *testing.B) { benchGemm(b, false) }

// BenchmarkDgemm is BenchmarkSgemm for float64.
func BenchmarkDgemm(b *testing.B) { benchGemm(b, true) }

func benchGemm(b *testing.B, double bool) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sh := range benchShapes {
		cl := newCall(rng, sh.tA, sh.tB, sh.m, sh.n, sh.k, 0, 1, 0)
		a, bb, c := to32(cl.a), to32(cl.b), to32(cl.c)
		for _, v := range Variants() {
			impl := New(v, 1)
			b.Run(fmt.Sprintf("%s/%s", sh.name, v.Name), func(b *testing.B) {
				best := time.Duration(math.MaxInt64)
				for b.Loop() {
					start := time.Now()
					if double {
						impl.Dgemm(sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, cl.a, cl.lda, cl.b, cl.ldb, 0, cl.c, cl.ldc)
					} else {
						impl.Sgemm(sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, a, cl.lda, bb, cl.ldb, 0, c, cl.ldc)
					}
					best = min(best, time.Since(start))
				}
				flops := 2 * float64(sh.m*sh.n*sh.k)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// The fastest single product: what the core does when nothing
				// else runs on it (the machine here is shared).
				b.ReportMetric(flops/best.Seconds()/1e9, "best-GFLOP/s")
			})
		}
	}
}
