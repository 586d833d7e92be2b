package models

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// refCE is a float64 reference for the mean cross-entropy, computed
// differently from the implementation: log-sum-exp via log1p over the
// non-maximal terms summed smallest first.
func refCE(z [][]float64, y [][]float64) float64 {
	var total float64
	for r, row := range z {
		m, mi := row[0], 0
		for j, v := range row {
			if v > m {
				m, mi = v, j
			}
		}
		var terms []float64
		for j, v := range row {
			if j != mi {
				terms = append(terms, math.Exp(v-m))
			}
		}
		sort.Float64s(terms)
		var s float64
		for _, e := range terms {
			s += e
		}
		lse := m + math.Log1p(s)
		for j, v := range row {
			total -= y[r][j] * (v - lse)
		}
	}
	return total / float64(len(z))
}

func refSoftmax(row []float64) []float64 {
	m := row[0]
	for _, v := range row {
		m = math.Max(m, v)
	}
	out := make([]float64, len(row))
	var s float64
	for j, v := range row {
		out[j] = math.Exp(v - m)
		s += out[j]
	}
	for j := range out {
		out[j] /= s
	}
	return out
}

func flat(rows [][]float64) []float64 {
	var out []float64
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

func oneHotRows(labels []int, classes int) [][]float64 {
	out := make([][]float64, len(labels))
	for i, l := range labels {
		out[i] = make([]float64, classes)
		out[i][l] = 1
	}
	return out
}

// ceGraph builds loss = CrossEntropy(z, y) with z a trainable matrix (so the
// gradient with respect to logits can be taken) and, optionally, a factor
// multiplying the loss to test the upstream gradient.
type ceGraph struct {
	z, y, loss, dz *G.Node
	vm             G.VM
}

func buildCE(t *testing.T, dt tensor.Dtype, z, y [][]float64, factor float64) *ceGraph {
	t.Helper()
	g := G.NewGraph()
	rows, cols := len(z), len(z[0])
	mk := func(d []float64) *tensor.Dense {
		if dt == tensor.Float32 {
			f := make([]float32, len(d))
			for i, v := range d {
				f[i] = float32(v)
			}
			return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(f))
		}
		return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(append([]float64(nil), d...)))
	}
	c := &ceGraph{}
	require.NoError(t, graphlock.Do(func() error {
		c.z = G.NewMatrix(g, dt, G.WithShape(rows, cols), G.WithName("z"), G.WithValue(mk(flat(z))))
		c.y = G.NewMatrix(g, dt, G.WithShape(rows, cols), G.WithName("y"), G.WithValue(mk(flat(y))))
		return nil
	}))
	var err error
	c.loss, err = CrossEntropy(c.z, c.y)
	require.NoError(t, err)
	cost := c.loss
	require.NoError(t, graphlock.Do(func() error {
		if factor != 1 {
			var f *G.Node
			if dt == tensor.Float32 {
				f = G.NewConstant(float32(factor))
			} else {
				f = G.NewConstant(factor)
			}
			if cost, err = G.Mul(c.loss, f); err != nil {
				return err
			}
		}
		grads, err := G.Grad(cost, c.z)
		if err != nil {
			return err
		}
		c.dz = grads[0]
		c.vm = G.NewTapeMachine(g)
		return nil
	}))
	t.Cleanup(func() { c.vm.Close() })
	return c
}

func (c *ceGraph) run(t *testing.T) float64 {
	t.Helper()
	c.vm.Reset()
	require.NoError(t, c.vm.RunAll())
	return scalarValue(t, c.loss.Value())
}

// Rows where gorgonia's built-ins fail: huge logits, and rows whose first
// element is not the row maximum.
var ceCases = []struct {
	name   string
	z      [][]float64
	labels []int
}{
	{"small", [][]float64{{0.1, -0.3, 0.7, 0.2}, {1, 2, 3, 4}, {-1, 0, 0, 1}}, []int{2, 0, 3}},
	{"first not max", [][]float64{{-5, 3, 9, 1}, {0, 50, -20, 10}}, []int{2, 3}},
	{"huge", [][]float64{{1e4, -1e4, 0, 1e4 - 1}, {-1e4, -1e4 + 2, -1e4 + 1, -2e4}, {3e4, 1e4, 2e4, 3e4}}, []int{3, 1, 2}},
	{"uniform", [][]float64{{0, 0, 0, 0}, {7, 7, 7, 7}}, []int{0, 3}},
}

func TestCrossEntropyValue(t *testing.T) {
	for _, tc := range ceCases {
		t.Run(tc.name, func(t *testing.T) {
			y := oneHotRows(tc.labels, len(tc.z[0]))
			want := refCE(tc.z, y)
			require.False(t, math.IsNaN(want) || math.IsInf(want, 0))
			got := buildCE(t, tensor.Float64, tc.z, y, 1).run(t)
			assert.InDelta(t, want, got, 1e-12*math.Max(1, math.Abs(want)), "float64")

			got32 := buildCE(t, tensor.Float32, tc.z, y, 1).run(t)
			// float32 inputs are rounded (1e4−1 is exact in float32, 3e4 too).
			assert.InDelta(t, want, got32, 1e-5*math.Max(1, math.Abs(want)), "float32")
		})
	}
	t.Run("known values", func(t *testing.T) {
		// uniform row: log(C); a row [1e4, 1e4−1, 1e4−2] labelled 0: log(1+e⁻¹+e⁻²).
		z := [][]float64{{0, 0, 0, 0, 0}, {1e4, 1e4 - 1, 1e4 - 2, -1e4, -1e4}}
		y := oneHotRows([]int{4, 0}, 5)
		want := (math.Log(5) + math.Log(1+math.Exp(-1)+math.Exp(-2)+2*math.Exp(-2e4))) / 2
		assert.InDelta(t, want, buildCE(t, tensor.Float64, z, y, 1).run(t), 1e-12)
	})
}

// The gradient w.r.t. logits is (softmax − y)/batch × upstream, and matches
// central finite differences of the loss.
func TestCrossEntropyGradient(t *testing.T) {
	for _, tc := range ceCases {
		for _, factor := range []float64{1, 3} {
			t.Run(tc.name, func(t *testing.T) {
				rows, cols := len(tc.z), len(tc.z[0])
				y := oneHotRows(tc.labels, cols)
				c := buildCE(t, tensor.Float64, tc.z, y, factor)
				c.run(t)
				dz := toF64(t, c.dz.Value())
				require.Len(t, dz, rows*cols)
				for r, row := range tc.z {
					p := refSoftmax(row)
					for j := range row {
						want := factor * (p[j] - y[r][j]) / float64(rows)
						assert.InDelta(t, want, dz[r*cols+j], 1e-12, "analytic [%d,%d]", r, j)
					}
				}
				if tc.name == "huge" {
					return // finite differences are meaningless at 1e4 magnitudes
				}
				zd := f64s(t, c.z)
				const eps = 1e-6
				for i := range zd {
					orig := zd[i]
					zd[i] = orig + eps
					lp := c.run(t)
					zd[i] = orig - eps
					lm := c.run(t)
					zd[i] = orig
					fd := factor * (lp - lm) / (2 * eps)
					assert.InDelta(t, fd, dz[i], 1e-7, "finite difference [%d]", i)
				}
			})
		}
	}
}

func TestCrossEntropyGradientFloat32(t *testing.T) {
	tc := ceCases[1]
	y := oneHotRows(tc.labels, 4)
	c := buildCE(t, tensor.Float32, tc.z, y, 1)
	c.run(t)
	_, ok := c.dz.Value().Data().([]float32)
	require.True(t, ok, "float32 gradient, got %T", c.dz.Value().Data())
	dz := toF64(t, c.dz.Value())
	for r, row := range tc.z {
		p := refSoftmax(row)
		for j := range row {
			assert.InDelta(t, (p[j]-y[r][j])/2, dz[r*4+j], 1e-6)
		}
	}
}

// Soft labels: the gradient is softmax·Σy − y, still the exact derivative.
func TestCrossEntropySoftLabels(t *testing.T) {
	z := [][]float64{{0.5, -1, 2}, {3, 0, 1}}
	y := [][]float64{{0.2, 0.3, 0.5}, {0, 0.5, 0.25}}
	c := buildCE(t, tensor.Float64, z, y, 1)
	assert.InDelta(t, refCE(z, y), c.run(t), 1e-12)
	dz := toF64(t, c.dz.Value())
	zd := f64s(t, c.z)
	for i := range zd {
		orig := zd[i]
		zd[i] = orig + 1e-6
		lp := c.run(t)
		zd[i] = orig - 1e-6
		lm := c.run(t)
		zd[i] = orig
		assert.InDelta(t, (lp-lm)/2e-6, dz[i], 1e-7)
	}
}

func TestCrossEntropyNoGradientToLabels(t *testing.T) {
	g := G.NewGraph()
	var z, y *G.Node
	require.NoError(t, graphlock.Do(func() error {
		z = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("z"))
		y = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("y"))
		return nil
	}))
	loss, err := CrossEntropy(z, y)
	require.NoError(t, err)
	require.NoError(t, graphlock.Do(func() error {
		_, err := G.Grad(loss, y)
		assert.Error(t, err, "labels are not differentiable")
		return nil
	}))
}

func TestCrossEntropyErrors(t *testing.T) {
	g := G.NewGraph()
	var a, b, c, v *G.Node
	require.NoError(t, graphlock.Do(func() error {
		a = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("a"))
		b = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 4), G.WithName("b"))
		c = G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("c"))
		v = G.NewVector(g, tensor.Float64, G.WithShape(3), G.WithName("v"))
		return nil
	}))
	_, err := CrossEntropy(a, b)
	assert.ErrorContains(t, err, "shape")
	_, err = CrossEntropy(a, c)
	assert.ErrorContains(t, err, "dtype")
	_, err = CrossEntropy(v, v)
	assert.ErrorContains(t, err, "shape")
	_, err = CrossEntropy(nil, a)
	assert.Error(t, err)
}
