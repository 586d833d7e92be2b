package models

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// ReLU and its gradient equal gorgonia's Rectify bit for bit, special
// values included (±0, ±Inf, NaN, denormals), for both dtypes: the loss
// Σ(relu(x) ⊙ w) and d loss / dx through each.
func TestReLUMatchesRectify(t *testing.T) {
	specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1e-310, -1e-310, 1e-40, -1e-40, 3, -3}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, shape := range []tensor.Shape{{1, 1}, {7, 13}, {2, 3, 4, 5}} {
			n := shape.TotalSize()
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			xs, ws := make([]float64, n), make([]float64, n)
			for i := range xs {
				xs[i], ws[i] = rng.NormFloat64(), rng.NormFloat64()
				if i < len(specials) && n > 1 {
					xs[i] = specials[i]
				}
			}
			ref := reluGraph(t, dt, shape, xs, ws, G.Rectify)
			got := reluGraph(t, dt, shape, xs, ws, relu)
			for k := range ref {
				require.Equal(t, len(ref[k]), len(got[k]))
				for i := range ref[k] {
					if math.Float64bits(ref[k][i]) != math.Float64bits(got[k][i]) {
						t.Fatalf("%v %v: %s element %d (x = %v): ReLU %v, Rectify %v", dt, shape, []string{"output", "gradient"}[k], i, xs[i], got[k][i], ref[k][i])
					}
				}
			}
		}
	}
}

// reluGraph evaluates relu(x) and d Σ(relu(x) ⊙ w) / dx with the given
// rectifier and returns both as float64.
func reluGraph(t *testing.T, dt tensor.Dtype, shape tensor.Shape, xs, ws []float64, relu func(*G.Node) (*G.Node, error)) [2][]float64 {
	t.Helper()
	g := G.NewGraph()
	var out, dx *G.Node
	require.NoError(t, graphlock.Do(func() error {
		x := G.NewTensor(g, dt, shape.Dims(), G.WithShape(shape...), G.WithName("x"), G.WithValue(backing(dt, shape, xs)))
		w := G.NewTensor(g, dt, shape.Dims(), G.WithShape(shape...), G.WithName("w"), G.WithValue(backing(dt, shape, ws)))
		var err error
		if out, err = relu(x); err != nil {
			return err
		}
		prod, err := G.HadamardProd(out, w)
		if err != nil {
			return err
		}
		loss, err := G.Sum(prod)
		if err != nil {
			return err
		}
		grads, err := G.Grad(loss, x)
		if err != nil {
			return err
		}
		dx = grads[0]
		return nil
	}))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	return [2][]float64{toF64(t, out.Value()), toF64(t, dx.Value())}
}

func backing(dt tensor.Dtype, shape tensor.Shape, v []float64) *tensor.Dense {
	if dt == tensor.Float64 {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
}
