package models

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convFilterGradOp: (x, dY) → dW = Σ_G dY_G·rows_G; rows is a group's row
// matrix (its own: see convFilterGrad for why), dyg its gathered output
// gradient and dwp the sums with padded rows (the bias gradient's among
// them); ran says that dwp holds a run's sums.
type convFilterGradOp struct {
	geom convGeom
	out  outBuffer
	rows scratch
	dyg  scratch
	dwp  scratch
	ran  bool
}

// convBiasGradOp: dW → db = Σ of dY over images and positions, (1, f, 1,
// 1), which the filter gradient's product has computed in its last
// padding column (see convFilterGrad): dW, unread, orders it after the
// filter gradient op filter, whose sums it copies.
type convBiasGradOp struct {
	geom   convGeom
	filter *convFilterGradOp
	out    outBuffer
}

// convInputGradOp: (w, dY) → dX = col2im(Wᵀ·dY_G) per group; dcol is a
// group's column matrix and dyg its gathered output gradient.
type convInputGradOp struct {
	geom convGeom
	out  outBuffer
	dcol scratch
	dyg  scratch
}

var (
	_ G.Op = (*convFilterGradOp)(nil)
	_ G.Op = (*convBiasGradOp)(nil)
	_ G.Op = (*convInputGradOp)(nil)
)

func (*convFilterGradOp) Arity() int { return 2 }
func (*convBiasGradOp) Arity() int   { return 1 }
func (*convInputGradOp) Arity() int  { return 2 }

// Types: Tensor4 a → Tensor4 a → Tensor4 a, Tensor4 a → Tensor4 a (dW →
// db), and
// Tensor4 a → Tensor4 a → Tensor4 a.
func (*convFilterGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a), tensor4(a))
}

func (*convBiasGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a))
}

func (*convInputGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(tensor4(a), tensor4(a), tensor4(a))
}

func (op *convFilterGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	g := op.geom
	if err := inferShapes("Conv2DFilterGrad", in, g.inShape(), g.outShape()); err != nil {
		return nil, err
	}
	return g.filterShape(), nil
}

func (op *convBiasGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := inferShapes("Conv2DBiasGrad", in, op.geom.filterShape()); err != nil {
		return nil, err
	}
	return op.geom.biasShape(), nil
}

func (op *convInputGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := inferShapes("Conv2DInputGrad", in, op.geom.filterShape(), op.geom.outShape()); err != nil {
		return nil, err
	}
	return op.geom.inShape(), nil
}

func (op *convFilterGradOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("Conv2DFilterGrad", 2, op, vals, filterGradDo[float32], filterGradDo[float64])
}

func filterGradDo[T float](op *convFilterGradOp, vals []G.Value) (G.Value, error) {
	g := op.geom
	x, err := dataOf[T]("Conv2DFilterGrad", "x", vals[0], g.n*g.image())
	if err != nil {
		return nil, err
	}
	dy, err := dataOf[T]("Conv2DFilterGrad", "dY", vals[1], g.n*g.outImage())
	if err != nil {
		return nil, err
	}
	v, err := vecVariant("Conv2DFilterGrad")
	if err != nil {
		return nil, err
	}
	out := shaped(&op.out, g.filterShape(), vals[0].Dtype())
	convFilterGrad(G.WhichBLAS(), v, g, x, dy, out.Data().([]T), scratchOf[T](&op.rows, g.groupRows()),
		scratchOf[T](&op.dyg, g.groupOut()), scratchOf[T](&op.dwp, g.f*g.kp()))
	op.ran = true
	return out, nil
}

func (op *convBiasGradOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("Conv2DBiasGrad", 1, op, vals, biasGradDo[float32], biasGradDo[float64])
}

func biasGradDo[T float](op *convBiasGradOp, vals []G.Value) (G.Value, error) {
	g := op.geom
	if _, err := dataOf[T]("Conv2DBiasGrad", "dW", vals[0], g.f*g.k()); err != nil {
		return nil, err
	}
	sums := scratchOf[T](&op.filter.dwp, g.f*g.kp())
	if !op.filter.ran {
		return nil, fmt.Errorf("Conv2DBiasGrad: the filter gradient has not run")
	}
	out := shaped(&op.out, g.biasShape(), vals[0].Dtype())
	db := out.Data().([]T)
	for f := range db[:g.f] {
		db[f] = sums[f*g.kp()+g.k()]
	}
	return out, nil
}

func (op *convInputGradOp) Do(vals ...G.Value) (G.Value, error) {
	return floatDo("Conv2DInputGrad", 2, op, vals, inputGradDo[float32], inputGradDo[float64])
}

func inputGradDo[T float](op *convInputGradOp, vals []G.Value) (G.Value, error) {
	g := op.geom
	w, err := dataOf[T]("Conv2DInputGrad", "w", vals[0], g.f*g.k())
	if err != nil {
		return nil, err
	}
	dy, err := dataOf[T]("Conv2DInputGrad", "dY", vals[1], g.n*g.outImage())
	if err != nil {
		return nil, err
	}
	v, err := vecVariant("Conv2DInputGrad")
	if err != nil {
		return nil, err
	}
	out := shaped(&op.out, g.inShape(), vals[0].Dtype())
	convInputGrad(G.WhichBLAS(), v, g, w, dy, out.Data().([]T), scratchOf[T](&op.dcol, g.groupCol()), scratchOf[T](&op.dyg, g.groupOut()))
	return out, nil
}

func (*convFilterGradOp) ReturnsPtr() bool     { return false }
func (*convFilterGradOp) CallsExtern() bool    { return false }
func (*convFilterGradOp) OverwritesInput() int { return -1 }
func (op *convFilterGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.Conv2DFilterGrad%v%v", op.geom.inShape(), op.geom.filterShape())
}
func (op *convFilterGradOp) Hashcode() uint32 { return opHash(op) }
func (*convFilterGradOp) String() string      { return "Conv2DFilterGrad" }

func (*convBiasGradOp) ReturnsPtr() bool     { return false }
func (*convBiasGradOp) CallsExtern() bool    { return false }
func (*convBiasGradOp) OverwritesInput() int { return -1 }
func (op *convBiasGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.Conv2DBiasGrad%v", op.geom.outShape())
}
func (op *convBiasGradOp) Hashcode() uint32 { return opHash(op) }
func (*convBiasGradOp) String() string      { return "Conv2DBiasGrad" }

func (*convInputGradOp) ReturnsPtr() bool     { return false }
func (*convInputGradOp) CallsExtern() bool    { return false }
func (*convInputGradOp) OverwritesInput() int { return -1 }
func (op *convInputGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "ringddp.Conv2DInputGrad%v%v", op.geom.inShape(), op.geom.filterShape())
}
func (op *convInputGradOp) Hashcode() uint32 { return opHash(op) }
func (*convInputGradOp) String() string      { return "Conv2DInputGrad" }
