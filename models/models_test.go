package models

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

var (
	mlpShapes   = []tensor.Shape{{784, 256}, {1, 256}, {256, 128}, {1, 128}, {128, 10}, {1, 10}}
	lenetShapes = []tensor.Shape{
		{8, 1, 5, 5}, {1, 8, 1, 1}, {16, 8, 5, 5}, {1, 16, 1, 1},
		{256, 64}, {1, 64}, {64, 10}, {1, 10},
	}
)

func TestLearnableShapesAndInitBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctor   modelCtor
		shapes []tensor.Shape
		fanIn  []int
	}{
		{"mlp", mlpCtor(), mlpShapes, []int{784, 784, 256, 256, 128, 128}},
		{"lenet", lenetCtor, lenetShapes, []int{25, 25, 200, 200, 256, 256, 64, 64}},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			t.Run(tc.name+"/"+dt.String(), func(t *testing.T) {
				m, err := tc.ctor(G.NewGraph(), dt, 1)
				require.NoError(t, err)
				learn := m.Learnables()
				require.Len(t, learn, len(tc.shapes))
				names := map[string]bool{}
				for i, p := range learn {
					assert.True(t, p.Shape().Eq(tc.shapes[i]), "param %d (%s): shape %v, want %v", i, p.Name(), p.Shape(), tc.shapes[i])
					assert.Equal(t, dt, p.Dtype())
					assert.False(t, names[p.Name()], "duplicate name %s", p.Name())
					names[p.Name()] = true
					vals := toF64(t, p.Value())
					require.Len(t, vals, tc.shapes[i].TotalSize())
					bound := 1 / math.Sqrt(float64(tc.fanIn[i]))
					var maxAbs, sum float64
					for _, v := range vals {
						maxAbs = math.Max(maxAbs, math.Abs(v))
						sum += v
					}
					assert.LessOrEqual(t, maxAbs, bound, "param %s exceeds U(-1/√fanIn, 1/√fanIn)", p.Name())
					if len(vals) >= 1000 {
						assert.Greater(t, maxAbs, 0.9*bound, "param %s does not fill its range", p.Name())
						assert.InDelta(t, 0, sum/float64(len(vals)), 0.1*bound)
					}
				}
				// Learnables returns a fresh slice.
				learn[0] = nil
				assert.NotNil(t, m.Learnables()[0])
			})
		}
	}
}

func TestInitDeterminism(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctor modelCtor
	}{{"mlp", mlpCtor()}, {"lenet", lenetCtor}} {
		t.Run(tc.name, func(t *testing.T) {
			values := func(dt tensor.Dtype, seed int64) [][]float64 {
				m, err := tc.ctor(G.NewGraph(), dt, seed)
				require.NoError(t, err)
				var out [][]float64
				for _, p := range m.Learnables() {
					out = append(out, toF64(t, p.Value()))
				}
				return out
			}
			a, b, c := values(tensor.Float64, 42), values(tensor.Float64, 42), values(tensor.Float64, 43)
			assert.Equal(t, a, b, "same seed, same parameters")
			for i := range a {
				assert.NotEqual(t, a[i], c[i], "different seed, param %d equal", i)
			}
			// float32 parameters are the float64 ones rounded.
			f32 := values(tensor.Float32, 42)
			for i := range a {
				for j := range a[i] {
					require.Equal(t, float64(float32(a[i][j])), f32[i][j])
				}
			}
		})
	}
}

func TestForwardShapes(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run("mlp/"+dt.String(), func(t *testing.T) {
			r := buildRig(t, mlpCtor(), dt, 1, 5, 784, 10, false)
			assert.Equal(t, tensor.Shape{5, 10}, r.logits.Shape())
			x, y, _ := randInputs(dt, 1, 5, 784, 10)
			r.bind(t, x, y)
			loss := r.run(t)
			assert.False(t, math.IsNaN(loss) || math.IsInf(loss, 0))
			// random init on 10 classes: loss near log 10.
			assert.InDelta(t, math.Log(10), loss, 0.5)
			assert.Equal(t, tensor.Shape{5, 10}, r.logits.Value().Shape())
			assert.Equal(t, dt, r.logits.Value().Dtype())
			for i, gnode := range r.grads {
				assert.True(t, gnode.Value().Shape().Eq(r.learn[i].Shape()), "grad %d shape", i)
				assert.Equal(t, dt, gnode.Value().Dtype())
			}
		})
		t.Run("lenet/"+dt.String(), func(t *testing.T) {
			r := buildRig(t, lenetCtor, dt, 1, 3, 784, 10, false)
			assert.Equal(t, tensor.Shape{3, 10}, r.logits.Shape())
			x, y, _ := randInputs(dt, 1, 3, 784, 10)
			r.bind(t, x, y)
			loss := r.run(t)
			assert.False(t, math.IsNaN(loss) || math.IsInf(loss, 0))
			assert.InDelta(t, math.Log(10), loss, 0.5)
			for i, gnode := range r.grads {
				assert.True(t, gnode.Value().Shape().Eq(r.learn[i].Shape()), "grad %d shape", i)
				assert.Equal(t, dt, gnode.Value().Dtype())
			}
		})
	}
}

// float32 and float64 models built from the same seed agree to float32
// precision.
func TestFloat32MatchesFloat64(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctor modelCtor
	}{{"mlp", mlpCtor(20, 16, 4)}, {"lenet", lenetCtor}} {
		t.Run(tc.name, func(t *testing.T) {
			in, classes := 20, 4
			if tc.name == "lenet" {
				in, classes = 784, 10
			}
			var losses [2]float64
			var grads [2][][]float64
			for k, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
				r := buildRig(t, tc.ctor, dt, 9, 3, in, classes, false)
				x, y, _ := randInputs(dt, 2, 3, in, classes)
				r.bind(t, x, y)
				losses[k] = r.run(t)
				for _, gn := range r.grads {
					grads[k] = append(grads[k], toF64(t, gn.Value()))
				}
			}
			assert.InDelta(t, losses[0], losses[1], 1e-5)
			for i := range grads[0] {
				for j := range grads[0][i] {
					require.InDelta(t, grads[0][i][j], grads[1][i][j], 1e-4, "grad %d[%d]", i, j)
				}
			}
		})
	}
}

// Central finite differences of the full loss against the symbolic gradients,
// on a sample of entries of every parameter.
func TestGradientFiniteDifferences(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctor        modelCtor
		in, classes int
	}{
		{"mlp", mlpCtor(12, 9, 7, 5), 12, 5},
		{"lenet", lenetCtor, 784, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := buildRig(t, tc.ctor, tensor.Float64, 3, 3, tc.in, tc.classes, false)
			x, y, _ := randInputs(tensor.Float64, 3, 3, tc.in, tc.classes)
			r.bind(t, x, y)
			r.run(t)
			var analytic [][]float64
			for _, gn := range r.grads {
				analytic = append(analytic, toF64(t, gn.Value()))
			}
			rng := rand.New(rand.NewPCG(5, 5))
			const eps = 1e-6
			for i, p := range r.learn {
				data := f64s(t, p)
				for k := 0; k < 4; k++ {
					j := rng.IntN(len(data))
					orig := data[j]
					data[j] = orig + eps
					lp := r.run(t)
					data[j] = orig - eps
					lm := r.run(t)
					data[j] = orig
					fd := (lp - lm) / (2 * eps)
					tol := 1e-6 + 1e-4*math.Abs(fd)
					assert.InDelta(t, fd, analytic[i][j], tol, "%s[%d]: finite difference %g, gradient %g", p.Name(), j, fd, analytic[i][j])
				}
			}
		})
	}
}

// Forward from identity-op substitutes of the learnables (a stand-in for
// ddp's tap op) gives bitwise the same loss and gradients, and running the
// graph leaves the parameter values (shape and data) untouched.
func TestForwardWithSubstituteParams(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctor        modelCtor
		in, classes int
	}{
		{"mlp", mlpCtor(), 784, 10},
		{"lenet", lenetCtor, 784, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, y, _ := randInputs(tensor.Float64, 4, 3, tc.in, tc.classes)
			var losses [2]float64
			var grads [2][][]float64
			for k, subst := range []bool{false, true} {
				r := buildRig(t, tc.ctor, tensor.Float64, 11, 3, tc.in, tc.classes, subst)
				before := make([][]float64, len(r.learn))
				shapes := make([]tensor.Shape, len(r.learn))
				for i, p := range r.learn {
					before[i] = toF64(t, p.Value())
					shapes[i] = p.Value().Shape().Clone()
				}
				r.bind(t, x, y)
				losses[k] = r.run(t)
				require.Equal(t, losses[k], r.run(t), "a second run gives the same loss")
				for i, gn := range r.grads {
					grads[k] = append(grads[k], toF64(t, gn.Value()))
					p := r.learn[i]
					assert.Equal(t, shapes[i], p.Value().Shape(), "%s value reshaped by the run", p.Name())
					assert.Equal(t, before[i], toF64(t, p.Value()), "%s value changed by the run", p.Name())
				}
				assert.Equal(t, tensor.Shape{3, tc.in}, x.Shape(), "input value reshaped by the run")
			}
			assert.Equal(t, losses[0], losses[1])
			assert.Equal(t, grads[0], grads[1])
		})
	}
}

// Rebinding a parameter with G.Let to a view into a flat arena (as ddp does)
// is honoured by the next run, and writes into the arena are seen without a
// new Let.
func TestLetParamsIntoArena(t *testing.T) {
	r := buildRig(t, mlpCtor(6, 5, 3), tensor.Float64, 1, 2, 6, 3, false)
	x, y, _ := randInputs(tensor.Float64, 6, 2, 6, 3)
	r.bind(t, x, y)
	want := r.run(t)

	var total int
	for _, p := range r.learn {
		total += p.Shape().TotalSize()
	}
	arena := make([]float64, total)
	off := 0
	for _, p := range r.learn {
		n := p.Shape().TotalSize()
		copy(arena[off:off+n], f64s(t, p))
		view := tensor.New(tensor.WithShape(p.Shape().Clone()...), tensor.WithBacking(arena[off:off+n:off+n]))
		require.NoError(t, G.Let(p, view))
		off += n
	}
	assert.Equal(t, want, r.run(t))
	for i := range arena {
		arena[i] *= 0.5
	}
	assert.NotEqual(t, want, r.run(t), "writes into the arena reach the next run")
}

// A few dozen steps of plain SGD, written by hand on the gradient values,
// reduce the loss of a tiny separable problem.
func TestTrainingReducesLoss(t *testing.T) {
	const batch, in, classes = 24, 8, 3
	x := make([]float64, batch*in)
	labels := make([]uint8, batch)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range labels {
		c := i % classes
		labels[i] = uint8(c)
		for j := 0; j < in; j++ {
			x[i*in+j] = 0.3 * rng.NormFloat64()
			if j%classes == c {
				x[i*in+j] += 1
			}
		}
	}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			r := buildRig(t, mlpCtor(in, 16, classes), dt, 7, batch, in, classes, false)
			xv := tensor.New(tensor.WithShape(batch, in), tensor.WithBacking(append([]float64(nil), x...)))
			if dt == tensor.Float32 {
				x32 := make([]float32, len(x))
				for i, v := range x {
					x32[i] = float32(v)
				}
				xv = tensor.New(tensor.WithShape(batch, in), tensor.WithBacking(x32))
			}
			yv := tensor.New(tensor.Of(dt), tensor.WithShape(batch, classes))
			require.NoError(t, FillOneHot(yv, labels))
			r.bind(t, xv, yv)

			const lr = 0.5
			first := r.run(t)
			last := first
			for step := 0; step < 40; step++ {
				for i, p := range r.learn {
					switch d := p.Value().Data().(type) {
					case []float64:
						gd := r.grads[i].Value().Data().([]float64)
						for j := range d {
							d[j] -= lr * gd[j]
						}
					case []float32:
						gd := r.grads[i].Value().Data().([]float32)
						for j := range d {
							d[j] -= lr * gd[j]
						}
					}
				}
				last = r.run(t)
			}
			t.Logf("%v: loss %.4f → %.4f", dt, first, last)
			assert.Less(t, last, 0.25*first)
			correct, err := CountCorrect(r.logits.Value().(tensor.Tensor), labels)
			require.NoError(t, err)
			assert.Equal(t, batch, correct)
		})
	}
}

func TestModelErrors(t *testing.T) {
	g := G.NewGraph()
	_, err := NewMLP(g, tensor.Int, 1)
	assert.ErrorContains(t, err, "int")
	_, err = NewLeNet(g, tensor.Complex128, 1)
	assert.ErrorContains(t, err, "complex128")
	_, err = NewMLP(g, tensor.Float64, 1, 10)
	assert.Error(t, err)
	_, err = NewMLP(g, tensor.Float64, 1, 10, 0, 3)
	assert.Error(t, err)
	_, err = NewMLP(nil, tensor.Float64, 1)
	assert.Error(t, err)

	m, err := NewMLP(g, tensor.Float64, 1, 4, 3, 2)
	require.NoError(t, err)
	var x, x32, wrongX *G.Node
	require.NoError(t, graphlock.Do(func() error {
		x = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 4), G.WithName("x"))
		x32 = G.NewMatrix(g, tensor.Float32, G.WithShape(2, 4), G.WithName("x32"))
		wrongX = G.NewMatrix(g, tensor.Float64, G.WithShape(2, 5), G.WithName("wx"))
		return nil
	}))
	learn := m.Learnables()
	_, err = m.Forward(x, learn[:3])
	assert.ErrorContains(t, err, "params")
	swapped := append(G.Nodes(nil), learn...)
	swapped[0], swapped[2] = swapped[2], swapped[0]
	_, err = m.Forward(x, swapped)
	assert.ErrorContains(t, err, "shape")
	_, err = m.Forward(wrongX, learn)
	assert.ErrorContains(t, err, "input shape")
	_, err = m.Forward(x32, learn)
	assert.ErrorContains(t, err, "dtype")
	other, err := NewMLP(G.NewGraph(), tensor.Float64, 1, 4, 3, 2)
	require.NoError(t, err)
	_, err = m.Forward(x, other.Learnables())
	assert.ErrorContains(t, err, "graph")

	ln, err := NewLeNet(g, tensor.Float64, 1)
	require.NoError(t, err)
	_, err = ln.Forward(x, ln.Learnables())
	assert.ErrorContains(t, err, "input shape")
}

// gorgonia hash-conses nodes: two input nodes with the same name, type and
// shape collapse into one. Two models in one graph must still get distinct
// parameters.
func TestTwoModelsInOneGraph(t *testing.T) {
	g := G.NewGraph()
	a, err := NewMLP(g, tensor.Float64, 1, 4, 3)
	require.NoError(t, err)
	b, err := NewMLP(g, tensor.Float64, 2, 4, 3)
	require.NoError(t, err)
	for i := range a.Learnables() {
		pa, pb := a.Learnables()[i], b.Learnables()[i]
		assert.NotSame(t, pa, pb)
		assert.NotEqual(t, pa.Name(), pb.Name())
		assert.NotEqual(t, toF64(t, pa.Value()), toF64(t, pb.Value()))
	}
}
