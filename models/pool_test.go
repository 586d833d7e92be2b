package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// poolShapes: one window, odd heights and widths (a row or column in no
// window), several planes.
var poolShapes = []tensor.Shape{{1, 1, 2, 2}, {2, 3, 5, 4}, {1, 2, 7, 9}, {3, 1, 4, 6}, {2, 8, 24, 24}}

// poolValues draws n values from a few, so that windows tie often; with
// specials, NaN, ±Inf and ±0 among them.
func poolValues(rng *rand.Rand, n int, specials bool) []float64 {
	few := []float64{-2, -1, 0, 1, 2, 3}
	if specials {
		few = append(few, math.NaN(), math.NaN(), math.Inf(-1), math.Inf(-1), math.Inf(1), math.Copysign(0, -1))
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = few[rng.IntN(len(few))]
	}
	return v
}

// poolGraph evaluates pool(x) and d Σ(pool(x) ⊙ r) / dx for pool and
// returns both as float64.
func poolGraph(t *testing.T, dt tensor.Dtype, s tensor.Shape, xs, rs []float64, pool func(*G.Node) (*G.Node, error)) (y, dx []float64) {
	t.Helper()
	gr := G.NewGraph()
	var out, grad *G.Node
	require.NoError(t, graphlock.Do(func() error {
		x := G.NewTensor(gr, dt, 4, G.WithShape(s...), G.WithName("x"), G.WithValue(backing(dt, s, xs)))
		var err error
		if out, err = pool(x); err != nil {
			return err
		}
		os := out.Shape()
		r := G.NewTensor(gr, dt, 4, G.WithShape(os...), G.WithName("r"), G.WithValue(backing(dt, os, rs[:os.TotalSize()])))
		_, grads, err := weightedSum(out, r, false, x)
		if err != nil {
			return err
		}
		grad = grads[0]
		return nil
	}))
	vm := G.NewTapeMachine(gr)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	return toF64(t, out.Value()), toF64(t, grad.Value())
}

// directPool is the reference: each window's winner is the first element,
// in row-major order, equal to the window's maximum (math.Max over its
// numbers), or its first element when it holds only NaN; dx is r at the
// winners and 0 elsewhere.
func directPool(s tensor.Shape, x, r []float64) (y, dx []float64) {
	oh, ow := s[2]/2, s[3]/2
	dx = make([]float64, len(x))
	o := 0
	for pl := 0; pl < s[0]*s[1]; pl++ {
		for i := 0; i < oh; i++ {
			for j := 0; j < ow; j++ {
				var win []int
				for _, d := range [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
					win = append(win, pl*s[2]*s[3]+(2*i+d[0])*s[3]+2*j+d[1])
				}
				m, numbers := math.Inf(-1), false
				for _, k := range win {
					if !math.IsNaN(x[k]) {
						m, numbers = math.Max(m, x[k]), true
					}
				}
				at := win[0]
				if numbers {
					for k := len(win) - 1; k >= 0; k-- {
						if x[win[k]] == m {
							at = win[k]
						}
					}
				}
				y = append(y, x[at])
				dx[at] = r[o]
				o++
			}
		}
	}
	return y, dx
}

// requireSameBits requires bitwise equal slices (any NaN equal to any NaN).
func requireSameBits(t *testing.T, what string, got, want []float64) {
	t.Helper()
	require.Equal(t, len(want), len(got), what)
	for i := range want {
		if math.IsNaN(want[i]) && math.IsNaN(got[i]) {
			continue
		}
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("%s element %d: got %v, want %v", what, i, got[i], want[i])
		}
	}
}

// MaxPool2x2 and its gradient equal the direct reference bit for bit,
// ties, NaN, ±Inf and ±0 included, for both dtypes.
func TestMaxPool2x2MatchesDirect(t *testing.T) {
	nan, inf, negZero := math.NaN(), math.Inf(1), math.Copysign(0, -1)
	special := []float64{ // one window per plane
		nan, nan, nan, nan,
		-inf, -inf, -inf, -inf,
		nan, -inf, nan, -inf,
		negZero, 0, nan, negZero,
		-math.MaxFloat32, -math.MaxFloat64, nan, -inf,
		nan, 1, inf, inf,
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for k, s := range append([]tensor.Shape{{1, 6, 2, 2}}, poolShapes...) {
			rng := rand.New(rand.NewPCG(uint64(s.TotalSize()), 2))
			xs, rs := poolValues(rng, s.TotalSize(), true), normals(rng, s.TotalSize())
			if k == 0 {
				xs = special
			}
			x, r := toF64(t, backing(dt, s, xs)), toF64(t, backing(dt, s, rs))
			y, dx := poolGraph(t, dt, s, xs, rs, maxPool2x2)
			wantY, wantDX := directPool(s, x, r)
			requireSameBits(t, fmt.Sprintf("%v %v y", dt, s), y, wantY)
			requireSameBits(t, fmt.Sprintf("%v %v dx", dt, s), dx, wantDX)
		}
	}
}

// Where gorgonia's MaxPool2D is defined (no NaN, every window holding a
// number above −MaxFloat), MaxPool2x2 and its gradient equal it bit for
// bit, ties included.
func TestMaxPool2x2MatchesGorgonia(t *testing.T) {
	gorgonia := func(x *G.Node) (*G.Node, error) {
		return G.MaxPool2D(x, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})
	}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, s := range poolShapes {
			rng := rand.New(rand.NewPCG(uint64(s.TotalSize()), 3))
			xs, rs := poolValues(rng, s.TotalSize(), false), normals(rng, s.TotalSize())
			y, dx := poolGraph(t, dt, s, xs, rs, maxPool2x2)
			wantY, wantDX := poolGraph(t, dt, s, xs, rs, gorgonia)
			requireSameBits(t, fmt.Sprintf("%v %v y", dt, s), y, wantY)
			requireSameBits(t, fmt.Sprintf("%v %v dx", dt, s), dx, wantDX)
		}
	}
}

// Central finite differences of Σ(pool(x)² ⊙ r) in float64 match the
// symbolic gradient for every element of x (distinct values: no ties
// within the step).
func TestMaxPool2x2FiniteDifferences(t *testing.T) {
	s := tensor.Shape{2, 2, 5, 4}
	rng := rand.New(rand.NewPCG(8, 8))
	gr := G.NewGraph()
	var x, loss *G.Node
	var grads G.Nodes
	require.NoError(t, graphlock.Do(func() error {
		x = G.NewTensor(gr, tensor.Float64, 4, G.WithShape(s...), G.WithName("x"), G.WithValue(backing(tensor.Float64, s, normals(rng, s.TotalSize()))))
		y, err := maxPool2x2(x)
		if err != nil {
			return err
		}
		os := y.Shape()
		r := G.NewTensor(gr, tensor.Float64, 4, G.WithShape(os...), G.WithName("r"), G.WithValue(backing(tensor.Float64, os, normals(rng, os.TotalSize()))))
		loss, grads, err = weightedSum(y, r, true, x)
		return err
	}))
	vm := G.NewTapeMachine(gr)
	defer vm.Close()
	run := func() float64 {
		vm.Reset()
		require.NoError(t, vm.RunAll())
		return scalarValue(t, loss.Value())
	}
	run()
	checkFiniteDifferences(t, G.Nodes{x}, grads, run)
}

// MaxPool2x2 refuses inputs that are not 4-D with windows to pool.
func TestMaxPool2x2Errors(t *testing.T) {
	gr := G.NewGraph()
	_, err := MaxPool2x2(nil)
	require.Error(t, err)
	for i, s := range []tensor.Shape{{4, 4}, {2, 3, 8}, {1, 1, 1, 8}, {1, 1, 8, 1}} {
		x := G.NewTensor(gr, tensor.Float64, len(s), G.WithShape(s...), G.WithName(fmt.Sprintf("x%d", i)))
		_, err := MaxPool2x2(x)
		require.Error(t, err, "%v", s)
	}
}
