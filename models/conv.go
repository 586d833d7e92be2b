package models

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Conv2D is a valid (unpadded) stride-1 2-D convolution with bias, as one
// op, for NCHW images x (batch, cin, h, w), filters w (cout, cin, kh, kw)
// and a bias b (1, cout, 1, 1) of one float dtype:
//
//	y[n, f, oy, ox] = b[f] + Σ_{ci,i,j} w[f, ci, i, j] · x[n, ci, oy+i, ox+j]
//
// with y (batch, cout, h−kh+1, w−kw+1) in NCHW (see convGeom for the
// algorithm: im2col and one matrix product per group of images, through
// gorgonia's BLAS). Its gradients are ops too: dW = Σ_G dY_G·rows_G (the
// column matrices' transposes built as matrices of their own, im2row),
// db = Σ of dY over images and positions (a column of ones in rows_G: the
// same product), dX = col2im(Wᵀ·dY_G). With
// gradX false no gradient is built for x (a layer whose input is data):
// the graph then treats x as not differentiable, and G.Grad with respect
// to x is an error. The op and its gradients keep their output buffers
// and lowered matrices from run to run. Conv2D takes graphlock; the
// models call conv2d inside their own graphlock.Do.
func Conv2D(x, w, b *G.Node, gradX bool) (*G.Node, error) {
	return locked(func() (*G.Node, error) { return conv2d(x, w, b, gradX) })
}

// conv2d is Conv2D for a caller that holds graphlock.
func conv2d(x, w, b *G.Node, gradX bool) (*G.Node, error) {
	if x == nil || w == nil || b == nil {
		return nil, fmt.Errorf("models: Conv2D: nil node")
	}
	g, err := convGeometry(x.Shape(), w.Shape(), b.Shape())
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	if x.Dtype() != w.Dtype() || x.Dtype() != b.Dtype() {
		return nil, fmt.Errorf("models: Conv2D: dtypes x %v, w %v, b %v differ", x.Dtype(), w.Dtype(), b.Dtype())
	}
	if err := checkDtype(x.Dtype()); err != nil {
		return nil, err
	}
	out, err := G.ApplyOp(&convOp{geom: g, gradX: gradX}, x, w, b)
	if err != nil {
		return nil, fmt.Errorf("models: Conv2D: %w", err)
	}
	return out, nil
}

// convGeometry validates the shapes of x, w and b for Conv2D and returns
// the convolution's geometry.
func convGeometry(x, w, b tensor.Shape) (convGeom, error) {
	if x.Dims() != 4 || w.Dims() != 4 {
		return convGeom{}, fmt.Errorf("Conv2D: x %v, w %v: want x (batch, cin, h, w) and w (cout, cin, kh, kw)", x, w)
	}
	g := convGeom{n: x[0], c: x[1], h: x[2], w: x[3], f: w[0], kh: w[2], kw: w[3]}
	if g.n <= 0 || g.c <= 0 || g.f <= 0 || g.kh <= 0 || g.kw <= 0 {
		return convGeom{}, fmt.Errorf("Conv2D: empty x %v or w %v", x, w)
	}
	if w[1] != g.c {
		return convGeom{}, fmt.Errorf("Conv2D: w %v has %d input channels, x %v has %d", w, w[1], x, g.c)
	}
	if g.kh > g.h || g.kw > g.w {
		return convGeom{}, fmt.Errorf("Conv2D: kernel %d×%d larger than the image %d×%d (only valid, unpadded, stride-1 convolutions)", g.kh, g.kw, g.h, g.w)
	}
	if !b.Eq(tensor.Shape{1, g.f, 1, 1}) {
		return convGeom{}, fmt.Errorf("Conv2D: bias %v, want (1, %d, 1, 1)", b, g.f)
	}
	g.oh, g.ow = g.h-g.kh+1, g.w-g.kw+1
	return g, nil
}

// convOp: (x, w, b) → y. Its buffer is the node's value every run; col
// is a group's column matrix and wb the filter with the bias as a last
// column.
type convOp struct {
	geom  convGeom
	gradX bool
	out   outBuffer
	col   scratch
	wb    scratch
}

var (
	_ G.Op   = (*convOp)(nil)
	_ G.SDOp = (*convOp)(nil)
)

func (*convOp) Arity() int { return 3 }

// Type: Tensor4 a → Tensor4 a → Tensor4 a → Tensor4 a.
func (*convOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a), tensor4(a), tensor4(a))
}

func (op *convOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := inferShapes("Conv2D", in, op.geom.inShape(), op.geom.filterShape(), op.geom.biasShape()); err != nil {
		return nil, err
	}
	return op.geom.outShape(), nil
}

func (op *convOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("Conv2D", 3, op, vals, convDo[float32], convDo[float64])
}

func convDo[T float](op *convOp, vals []G.Value) (G.Value, error) {
	g := op.geom
	x, err := dataOf[T]("Conv2D", "x", vals[0], g.n*g.image())
	if err != nil {
		return nil, err
	}
	w, err := dataOf[T]("Conv2D", "w", vals[1], g.f*g.k())
	if err != nil {
		return nil, err
	}
	b, err := dataOf[T]("Conv2D", "b", vals[2], g.f)
	if err != nil {
		return nil, err
	}
	v, err := vecVariant("Conv2D")
	if err != nil {
		return nil, err
	}
	out := shaped(&op.out, g.outShape(), vals[0].Dtype())
	convForward(G.WhichBLAS(), v, g, x, w, b, out.Data().([]T), scratchOf[T](&op.col, g.groupCol()), scratchOf[T](&op.wb, g.f*(g.k()+1)))
	return out, nil
}

func (*convOp) ReturnsPtr() bool     { return false }
func (*convOp) CallsExtern() bool    { return false }
func (*convOp) OverwritesInput() int { return -1 }
func (op *convOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.Conv2D%v%v(gradX %t)", op.geom.inShape(), op.geom.filterShape(), op.gradX)
}
func (op *convOp) Hashcode() uint32 { return opHash(op) }
func (op *convOp) String() string {
	return fmt.Sprintf("Conv2D%v%v", op.geom.inShape(), op.geom.filterShape())
}

// DiffWRT: w and b, and x when the op was built with gradX.
func (op *convOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range d {
		d[i] = i > 0 || op.gradX
	}
	return d
}

// SymDiff returns the gradient nodes of x (nil without gradX), w and b.
func (op *convOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 3 {
		return nil, fmt.Errorf("Conv2D.SymDiff: want 3 inputs, got %d", len(inputs))
	}
	filter := &convFilterGradOp{geom: op.geom}
	dw, err := G.ApplyOp(filter, inputs[0], grad)
	if err != nil {
		return nil, fmt.Errorf("Conv2D.SymDiff: filter: %w", err)
	}
	db, err := G.ApplyOp(&convBiasGradOp{geom: op.geom, filter: filter}, dw)
	if err != nil {
		return nil, fmt.Errorf("Conv2D.SymDiff: bias: %w", err)
	}
	var dx *G.Node
	if op.gradX {
		if dx, err = G.ApplyOp(&convInputGradOp{geom: op.geom}, inputs[1], grad); err != nil {
			return nil, fmt.Errorf("Conv2D.SymDiff: input: %w", err)
		}
	}
	return G.Nodes{dx, dw, db}, nil
}

// inferShapes checks that in are the shapes want.
func inferShapes(op string, in []G.DimSizer, want ...tensor.Shape) error {
	if len(in) != len(want) {
		return fmt.Errorf("%s: want %d inputs, got %d", op, len(want), len(in))
	}
	for i, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || !s.Eq(want[i]) {
			return fmt.Errorf("%s: input %d shape %v, want %v", op, i, d, want[i])
		}
	}
	return nil
}
