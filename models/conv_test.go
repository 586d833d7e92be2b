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
	"github.com/ringddp/ringddp/internal/vecops"
)

// convCases are the geometries the tests run: outputs of size 1, 1×1 and
// 5×5 kernels, batch 1, one and three input channels, h ≠ w, kh ≠ kw,
// LeNet's two layers, and batches taken in several groups (budget: two
// images' column matrices per product, the last group one image; three
// per product, output rows of 17, a run of more than eight).
var convCases = []convGeom{
	{n: 5, c: 2, h: 6, w: 7, f: 3, kh: 3, kw: 2, budget: 2 * 2 * 3 * 2 * 4 * 6},
	{n: 7, c: 3, h: 9, w: 19, f: 17, kh: 3, kw: 3, budget: 3 * 3 * 3 * 3 * 7 * 17},
	{n: 1, c: 1, h: 5, w: 5, f: 1, kh: 5, kw: 5},
	{n: 2, c: 3, h: 7, w: 5, f: 4, kh: 1, kw: 1},
	{n: 3, c: 3, h: 9, w: 6, f: 2, kh: 5, kw: 5},
	{n: 2, c: 3, h: 6, w: 11, f: 5, kh: 3, kw: 2},
	{n: 1, c: 1, h: 28, w: 28, f: 8, kh: 5, kw: 5},
	{n: 2, c: 8, h: 12, w: 12, f: 16, kh: 5, kw: 5},
}

// convRig is Conv2D(x, w, b) in a graph, the loss Σ(y ⊙ r) and its
// gradients with respect to x, w and b.
type convRig struct {
	x, w, b, r, y *G.Node
	grads         G.Nodes
	vm            G.VM
}

// newConvRig builds a convRig for g with values drawn from seed.
func newConvRig(t *testing.T, dt tensor.Dtype, g convGeom, seed uint64) *convRig {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	gr := G.NewGraph()
	c := &convRig{}
	require.NoError(t, graphlock.Do(func() error {
		node := func(name string, s tensor.Shape) *G.Node {
			return G.NewTensor(gr, dt, 4, G.WithShape(s...), G.WithName(name), G.WithValue(backing(dt, s, normals(rng, s.TotalSize()))))
		}
		c.x, c.w, c.b = node("x", g.inShape()), node("w", g.filterShape()), node("b", g.biasShape())
		c.r = node("r", g.outShape())
		var err error
		if c.y, err = conv2d(c.x, c.w, c.b, true); err != nil {
			return err
		}
		if _, c.grads, err = weightedSum(c.y, c.r, false, c.x, c.w, c.b); err != nil {
			return err
		}
		c.vm = G.NewTapeMachine(gr)
		return nil
	}))
	t.Cleanup(func() { c.vm.Close() })
	return c
}

func normals(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

// unitRoundoff is 2⁻²⁴ for float32 and 2⁻⁵³ for float64.
func unitRoundoff(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 0x1p-24
	}
	return 0x1p-53
}

// requireNear requires |got − want| ≤ (terms+2)·u·mag elementwise: the
// bound for a sum of terms products with magnitudes summing to mag,
// rounded to the dtype.
func requireNear(t *testing.T, what string, got, want, mag []float64, terms int, dt tensor.Dtype) {
	t.Helper()
	require.Equal(t, len(want), len(got), what)
	u := unitRoundoff(dt)
	for i := range want {
		tol := float64(terms+2)*u*mag[i] + 1e-300
		if d := math.Abs(got[i] - want[i]); !(d <= tol) {
			t.Fatalf("%s element %d: got %v, want %v (difference %g, bound %g)", what, i, got[i], want[i], d, tol)
		}
	}
}

// Conv2D's output and the gradients of Σ(y ⊙ r) equal direct nested-loop
// sums in float64 within the rounding bound of their sum lengths, for
// both dtypes, and again after the inputs change (buffers reused).
func TestConv2DMatchesDirectSums(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, g := range convCases {
			g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
			t.Run(fmt.Sprintf("%v/%v%v", dt, g.inShape(), g.filterShape()), func(t *testing.T) {
				checkConvAgainstDirect(t, dt, g)
			})
		}
	}
}

// checkConvAgainstDirect runs Conv2D for g twice (fresh inputs the second
// time) and compares its output and gradients with directConv.
func checkConvAgainstDirect(t *testing.T, dt tensor.Dtype, g convGeom) {
	c := newConvRig(t, dt, g, 1)
	rng := rand.New(rand.NewPCG(9, 9))
	for step := range 2 {
		if step > 0 {
			require.NoError(t, G.Let(c.x, backing(dt, g.inShape(), normals(rng, g.n*g.image()))))
			require.NoError(t, G.Let(c.r, backing(dt, g.outShape(), normals(rng, g.n*g.outImage()))))
			c.vm.Reset()
		}
		require.NoError(t, c.vm.RunAll())
		x, w, b, r := toF64(t, c.x.Value()), toF64(t, c.w.Value()), toF64(t, c.b.Value()), toF64(t, c.r.Value())
		ref := directConv(g, x, w, b, r)
		requireNear(t, "y", toF64(t, c.y.Value()), ref.y, ref.yMag, g.k()+1, dt)
		requireNear(t, "dX", toF64(t, c.grads[0].Value()), ref.dx, ref.dxMag, g.f*g.kh*g.kw, dt)
		requireNear(t, "dW", toF64(t, c.grads[1].Value()), ref.dw, ref.dwMag, g.n*g.p(), dt)
		requireNear(t, "db", toF64(t, c.grads[2].Value()), ref.db, ref.dbMag, g.n*g.p(), dt)
	}
}

// convRef is a direct convolution's output and gradients (of Σ(y ⊙ r)),
// each with the sum of its terms' magnitudes.
type convRef struct {
	y, yMag, dx, dxMag, dw, dwMag, db, dbMag []float64
}

// directConv computes convRef with nested loops over the definition.
func directConv(g convGeom, x, w, b, r []float64) convRef {
	var ref convRef
	for _, s := range []*[]float64{&ref.y, &ref.yMag} {
		*s = make([]float64, g.n*g.outImage())
	}
	for _, s := range []*[]float64{&ref.dx, &ref.dxMag} {
		*s = make([]float64, g.n*g.image())
	}
	for _, s := range []*[]float64{&ref.dw, &ref.dwMag} {
		*s = make([]float64, g.f*g.k())
	}
	ref.db, ref.dbMag = make([]float64, g.f), make([]float64, g.f)
	xi := func(n, c, y, x int) int { return ((n*g.c+c)*g.h+y)*g.w + x }
	wi := func(f, c, i, j int) int { return ((f*g.c+c)*g.kh+i)*g.kw + j }
	for n := 0; n < g.n; n++ {
		for f := 0; f < g.f; f++ {
			for oy := 0; oy < g.oh; oy++ {
				for ox := 0; ox < g.ow; ox++ {
					o := ((n*g.f+f)*g.oh+oy)*g.ow + ox
					ref.y[o], ref.yMag[o] = b[f], math.Abs(b[f])
					ref.db[f] += r[o]
					ref.dbMag[f] += math.Abs(r[o])
					for c := 0; c < g.c; c++ {
						for i := 0; i < g.kh; i++ {
							for j := 0; j < g.kw; j++ {
								a, v := xi(n, c, oy+i, ox+j), wi(f, c, i, j)
								ref.y[o] += w[v] * x[a]
								ref.yMag[o] += math.Abs(w[v] * x[a])
								ref.dw[v] += r[o] * x[a]
								ref.dwMag[v] += math.Abs(r[o] * x[a])
								ref.dx[a] += r[o] * w[v]
								ref.dxMag[a] += math.Abs(r[o] * w[v])
							}
						}
					}
				}
			}
		}
	}
	return ref
}

// Conv2D's output equals gorgonia's Conv2d plus the bias broadcast over
// batch and positions, within twice the rounding bound of the sum length.
func TestConv2DMatchesGorgoniaConv2d(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, g := range convCases {
			g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
			rng := rand.New(rand.NewPCG(uint64(g.col()), 5))
			xs, ws, bs := normals(rng, g.n*g.image()), normals(rng, g.f*g.k()), normals(rng, g.f)
			var ours, theirs *G.Node
			gr := G.NewGraph()
			require.NoError(t, graphlock.Do(func() error {
				x := G.NewTensor(gr, dt, 4, G.WithShape(g.inShape()...), G.WithName("x"), G.WithValue(backing(dt, g.inShape(), xs)))
				w := G.NewTensor(gr, dt, 4, G.WithShape(g.filterShape()...), G.WithName("w"), G.WithValue(backing(dt, g.filterShape(), ws)))
				b := G.NewTensor(gr, dt, 4, G.WithShape(g.biasShape()...), G.WithName("b"), G.WithValue(backing(dt, g.biasShape(), bs)))
				var err error
				if ours, err = conv2d(x, w, b, false); err != nil {
					return err
				}
				conv, err := G.Conv2d(x, w, tensor.Shape{g.kh, g.kw}, []int{0, 0}, []int{1, 1}, []int{1, 1})
				if err != nil {
					return err
				}
				theirs, err = G.BroadcastAdd(conv, b, nil, []byte{0, 2, 3})
				return err
			}))
			vm := G.NewTapeMachine(gr)
			require.NoError(t, vm.RunAll())
			vm.Close()
			ref := directConv(g, toF64(t, backing(dt, g.inShape(), xs)), toF64(t, backing(dt, g.filterShape(), ws)), toF64(t, backing(dt, g.biasShape(), bs)), make([]float64, g.n*g.outImage()))
			mag := append([]float64(nil), ref.yMag...)
			for i := range mag {
				mag[i] *= 2
			}
			requireNear(t, fmt.Sprintf("%v %v%v", dt, g.inShape(), g.filterShape()), toF64(t, ours.Value()), toF64(t, theirs.Value()), mag, g.k()+1, dt)
		}
	}
}

// Central finite differences of Σ(y² ⊙ r) in float64 match the symbolic
// gradients for every element of x, w and b on a tiny shape.
func TestConv2DFiniteDifferences(t *testing.T) {
	g := convGeom{n: 2, c: 2, h: 4, w: 5, f: 3, kh: 2, kw: 3}
	g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
	rng := rand.New(rand.NewPCG(4, 4))
	gr := G.NewGraph()
	var in, grads G.Nodes
	var loss *G.Node
	require.NoError(t, graphlock.Do(func() error {
		for _, s := range []struct {
			name  string
			shape tensor.Shape
		}{{"x", g.inShape()}, {"w", g.filterShape()}, {"b", g.biasShape()}, {"r", g.outShape()}} {
			in = append(in, G.NewTensor(gr, tensor.Float64, 4, G.WithShape(s.shape...), G.WithName(s.name), G.WithValue(backing(tensor.Float64, s.shape, normals(rng, s.shape.TotalSize())))))
		}
		y, err := conv2d(in[0], in[1], in[2], true)
		if err != nil {
			return err
		}
		loss, grads, err = weightedSum(y, in[3], true, in[0], in[1], in[2])
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
	checkFiniteDifferences(t, in[:3], grads, run)
}

// weightedSum builds the loss Σ(y ⊙ r), or Σ(y² ⊙ r) with square, and its
// gradients with respect to wrt (the caller holds graphlock).
func weightedSum(y, r *G.Node, square bool, wrt ...*G.Node) (*G.Node, G.Nodes, error) {
	if square {
		var err error
		if y, err = G.Square(y); err != nil {
			return nil, nil, err
		}
	}
	prod, err := G.HadamardProd(y, r)
	if err != nil {
		return nil, nil, err
	}
	loss, err := G.Sum(prod)
	if err != nil {
		return nil, nil, err
	}
	grads, err := G.Grad(loss, wrt...)
	return loss, grads, err
}

// checkFiniteDifferences compares every element of each gradient with a
// central finite difference of run's loss in the matching input.
func checkFiniteDifferences(t *testing.T, in, grads G.Nodes, run func() float64) {
	t.Helper()
	var analytic [][]float64
	for _, gn := range grads {
		analytic = append(analytic, toF64(t, gn.Value()))
	}
	const eps = 1e-6
	for k, n := range in {
		data := f64s(t, n)
		for j, orig := range data {
			data[j] = orig + eps
			lp := run()
			data[j] = orig - eps
			lm := run()
			data[j] = orig
			fd := (lp - lm) / (2 * eps)
			require.InDelta(t, fd, analytic[k][j], 1e-6+1e-5*math.Abs(fd), "%s[%d]", n.Name(), j)
		}
	}
}

// Conv2D refuses shapes other than a valid stride-1 convolution with a
// (1, cout, 1, 1) bias, mixed dtypes, and G.Grad with respect to x when
// built without its gradient.
func TestConv2DErrors(t *testing.T) {
	gr := G.NewGraph()
	mk := func(name string, dt tensor.Dtype, s ...int) *G.Node {
		return G.NewTensor(gr, dt, len(s), G.WithShape(s...), G.WithName(name))
	}
	f64 := tensor.Float64
	x := mk("x", f64, 2, 3, 8, 8)
	for _, tc := range []struct {
		name    string
		x, w, b *G.Node
	}{
		{"nil", x, nil, mk("b0", f64, 1, 4, 1, 1)},
		{"3-D input", mk("x3", f64, 3, 8, 8), mk("w1", f64, 4, 3, 3, 3), mk("b1", f64, 1, 4, 1, 1)},
		{"channels", x, mk("w2", f64, 4, 2, 3, 3), mk("b2", f64, 1, 4, 1, 1)},
		{"kernel too large", x, mk("w3", f64, 4, 3, 9, 3), mk("b3", f64, 1, 4, 1, 1)},
		{"bias shape", x, mk("w4", f64, 4, 3, 3, 3), mk("b4", f64, 4)},
		{"dtypes", x, mk("w5", tensor.Float32, 4, 3, 3, 3), mk("b5", f64, 1, 4, 1, 1)},
	} {
		_, err := Conv2D(tc.x, tc.w, tc.b, true)
		require.Error(t, err, tc.name)
	}
	y, err := Conv2D(x, mk("w", f64, 4, 3, 3, 3), mk("b", f64, 1, 4, 1, 1), false)
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{2, 4, 6, 6}, y.Shape())
	require.Error(t, graphlock.Do(func() error {
		s, err := G.Sum(y)
		if err != nil {
			return err
		}
		_, err = G.Grad(s, x)
		return err
	}))
}

// An image's row matrix is its column matrix transposed, element for
// element.
func TestIm2rowIsIm2colTransposed(t *testing.T) {
	for _, g := range convCases {
		g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
		x := normals(rand.New(rand.NewPCG(1, 1)), g.image())
		col, rows := make([]float64, g.col()), make([]float64, g.p()*g.kp())
		v, err := vecops.Best()
		require.NoError(t, err)
		im2col(v, g, x, col, g.p())
		im2row(v, g, x, rows)
		k, kp, p := g.k(), g.kp(), g.p()
		for q := 0; q < p; q++ {
			for r := 0; r < kp; r++ {
				want := 0.0 // the padding is not written
				if r < k {
					want = col[r*p+q]
				}
				require.Equal(t, want, rows[q*kp+r], "%v%v: row %d column %d", g.inShape(), g.filterShape(), r, q)
			}
		}
	}
}
