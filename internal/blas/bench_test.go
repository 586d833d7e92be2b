package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"

	"github.com/ringddp/ringddp/internal/gemm"
)

// contender is one BLAS in the comparison.
type contender struct {
	name string
	impl interface {
		blas.Float32
		blas.Float64
	}
}

// contenders are every gemm variant this CPU runs (gonum's last) and, in
// the openblas build, OpenBLAS on one thread: the baseline of issue #29.
func contenders() []contender {
	cs := baselines()
	for _, v := range gemm.Variants() {
		cs = append(cs, contender{"gemm-" + v.Name, gemm.New(v, 1)})
	}
	return cs
}

// gemmShapes are the MLP's products at batch 256 (the forward product and
// the two backward ones of each layer) and squares.
var gemmShapes = []struct {
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

// BenchmarkGemm times one thread of every contender at every shape, the
// contenders alternating within each shape, and reports GFLOP/s (2·m·n·k
// per product) over all products and for the fastest one (best-GFLOP/s:
// what the core does when nothing else runs on it; the machines here are
// shared). Run with -tags openblas for the OpenBLAS baseline, e.g.
//
//	go test -tags openblas -run - -bench Gemm -count 5 ./internal/blas
func BenchmarkGemm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, double := range []bool{false, true} {
		for _, sh := range gemmShapes {
			rowsA, rowsB := sh.m, sh.k
			if sh.tA != blas.NoTrans {
				rowsA = sh.k
			}
			if sh.tB != blas.NoTrans {
				rowsB = sh.n
			}
			lda, ldb := sh.m*sh.k/rowsA, sh.k*sh.n/rowsB
			a64, b64, c64 := random(rng, sh.m*sh.k), random(rng, sh.k*sh.n), random(rng, sh.m*sh.n)
			a32, b32, c32 := single(a64), single(b64), single(c64)
			for _, c := range contenders() {
				kind := "s"
				if double {
					kind = "d"
				}
				b.Run(fmt.Sprintf("%sgemm/%s/%s", kind, sh.name, c.name), func(b *testing.B) {
					best := time.Duration(math.MaxInt64)
					for b.Loop() {
						start := time.Now()
						if double {
							c.impl.Dgemm(sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, a64, lda, b64, ldb, 0, c64, sh.n)
						} else {
							c.impl.Sgemm(sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, a32, lda, b32, ldb, 0, c32, sh.n)
						}
						best = min(best, time.Since(start))
					}
					flops := 2 * float64(sh.m*sh.n*sh.k)
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(flops/best.Seconds()/1e9, "best-GFLOP/s")
				})
			}
		}
	}
}

func random(rng *rand.Rand, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = rng.Float64()*2 - 1
	}
	return s
}

func single(s []float64) []float32 {
	out := make([]float32, len(s))
	for i, v := range s {
		out[i] = float32(v)
	}
	return out
}
