package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	kernels "github.com/ringddp/ringddp/internal/gemm"
	"github.com/ringddp/ringddp/internal/vecops"
)

// useBLAS installs b as gorgonia's BLAS for the rest of the test (the
// package's tests do not run in parallel at the top level).
func useBLAS(t *testing.T, b G.BLAS) {
	old := G.WhichBLAS()
	G.Use(b)
	t.Cleanup(func() { G.Use(old) })
}

// Conv2D matches the direct sums with every GEMM variant this CPU runs
// (few-row and main micro-kernels, gonum's) and with the fastest vecops
// variant and the scalar loops (the convolution kernels are AVX-512 only).
func TestConv2DWithEveryKernel(t *testing.T) {
	cases := []convGeom{convCases[1], convCases[len(convCases)-1]}
	vs := vecops.Variants()
	for _, gv := range kernels.Variants() {
		for _, vv := range []vecops.Variant{vs[0], vs[len(vs)-1]} {
			t.Run(gv.Name+"/"+vv.Name, func(t *testing.T) {
				useBLAS(t, kernels.New(gv, 1))
				t.Setenv(vecops.VariantEnv, vv.Name)
				for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
					for _, g := range cases {
						g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
						checkConvAgainstDirect(t, dt, g)
					}
				}
			})
		}
	}
}

// convValues runs a fresh Conv2D rig for g and returns y, dX, dW and db.
func convValues(t *testing.T, dt tensor.Dtype, g convGeom) [][]float64 {
	c := newConvRig(t, dt, g, 7)
	require.NoError(t, c.vm.RunAll())
	out := [][]float64{toF64(t, c.y.Value())}
	for _, gr := range c.grads {
		out = append(out, toF64(t, gr.Value()))
	}
	return out
}

// Conv2D's output and gradients are bitwise the same for 1, 2 and 4 GEMM
// threads, at LeNet's second layer: 16 images in one group (each product
// big enough to split into several parts), and in groups of the default
// budget.
func TestConv2DBitwiseAcrossThreads(t *testing.T) {
	one := convGeom{n: 16, c: 8, h: 12, w: 12, f: 16, kh: 5, kw: 5, budget: 16 * 8 * 25 * 64}
	many := one
	many.n, many.budget = 12, 0 // groups of 10 and 2
	for _, g := range []convGeom{one, many} {
		g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
		checkThreads(t, g)
	}
}

// checkThreads runs Conv2D for g with 1, 2 and 4 GEMM threads and
// requires the same bits.
func checkThreads(t *testing.T, g convGeom) {
	v, err := kernels.Best()
	require.NoError(t, err)
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		var one [][]float64
		for _, threads := range []int{1, 2, 4} {
			useBLAS(t, kernels.New(v, threads))
			got := convValues(t, dt, g)
			if one == nil {
				one = got
				continue
			}
			for i := range got {
				if !slices.Equal(got[i], one[i]) {
					t.Fatalf("%v: output %d with %d threads differs from 1 thread", dt, i, threads)
				}
			}
		}
	}
}

// NaN and ±Inf in x, w and b reach exactly the outputs and gradients
// whose direct sums they enter, with the GEMM and vecops kernels in use.
func TestConv2DPropagatesSpecials(t *testing.T) {
	g := convGeom{n: 3, c: 2, h: 9, w: 7, f: 3, kh: 3, kw: 2, budget: 2 * 2 * 3 * 2 * 7 * 6}
	g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		c := newConvRig(t, dt, g, 11)
		rng := rand.New(rand.NewPCG(5, 5))
		xs := normals(rng, g.n*g.image())
		xs[10], xs[g.image()+33], xs[2*g.image()+50] = math.NaN(), math.Inf(1), math.Inf(-1)
		rs := normals(rng, g.n*g.outImage())
		rs[4] = math.Inf(1)
		require.NoError(t, G.Let(c.x, backing(dt, g.inShape(), xs)))
		require.NoError(t, G.Let(c.r, backing(dt, g.outShape(), rs)))
		c.vm.Reset()
		require.NoError(t, c.vm.RunAll())
		ref := directConv(g, toF64(t, c.x.Value()), toF64(t, c.w.Value()), toF64(t, c.b.Value()), toF64(t, c.r.Value()))
		for i, pair := range []struct {
			name      string
			got, want []float64
		}{
			{"y", toF64(t, c.y.Value()), ref.y}, {"dX", toF64(t, c.grads[0].Value()), ref.dx},
			{"dW", toF64(t, c.grads[1].Value()), ref.dw}, {"db", toF64(t, c.grads[2].Value()), ref.db},
		} {
			specials := 0
			for j, w := range pair.want {
				got := pair.got[j]
				switch {
				case math.IsNaN(w):
					specials++
					require.True(t, math.IsNaN(got), "%v %s[%d] = %v, want NaN", dt, pair.name, j, got)
				case math.IsInf(w, 0):
					specials++
					require.Equal(t, w, got, "%v %s[%d]", dt, pair.name, j)
				default:
					require.False(t, math.IsNaN(got) || math.IsInf(got, 0), "%v %s[%d] = %v, want %v", dt, pair.name, j, got, w)
				}
			}
			require.Positive(t, specials, fmt.Sprintf("%v: output %d (%s) met no special value", dt, i, pair.name))
		}
	}
}

// A vecops variant the CPU cannot run, named in RINGDDP_VECOPS, is the
// ops' error (naming the variable's value), as it is the optimizers'.
func TestOpsRefuseUnknownVecopsVariant(t *testing.T) {
	g := convCases[1]
	g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
	c := newConvRig(t, tensor.Float64, g, 3)
	t.Setenv(vecops.VariantEnv, "sse1")
	err := c.vm.RunAll()
	require.Error(t, err)
	require.Contains(t, err.Error(), "sse1")
}
