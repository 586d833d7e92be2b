package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/internal/vecops"
)

// outBuffer is an op's output tensor, kept from run to run so that the op
// allocates only when its input's shape or dtype changes. The tape may
// reshape or overwrite the value in place after the op (it reuses
// registers); the op writes every element again on each run and restores
// the shape, so neither matters.
type outBuffer struct{ t *tensor.Dense }

// like returns the buffer with x's shape and dtype.
func (b *outBuffer) like(x tensor.Tensor) *tensor.Dense { return shaped(b, x.Shape(), x.Dtype()) }

// elementwise computes ReLU (dy nil) or its gradient into buf for the
// values x and dy, which must be dense tensors of one float dtype and shape.
func elementwise(op string, buf *outBuffer, xv, dyv G.Value) (G.Value, error) {
	x, err := denseOf(op, "x", xv)
	if err != nil {
		return nil, err
	}
	var dy *tensor.Dense
	if dyv != nil {
		if dy, err = denseOf(op, "gradient", dyv); err != nil {
			return nil, err
		}
		if !dy.Shape().Eq(x.Shape()) || dy.Dtype() != x.Dtype() {
			return nil, fmt.Errorf("%s: gradient %v %v, input %v %v", op, dy.Shape(), dy.Dtype(), x.Shape(), x.Dtype())
		}
	}
	v, err := vecVariant(op)
	if err != nil {
		return nil, err
	}
	out := buf.like(x)
	switch xs := x.Data().(type) {
	case []float32:
		rectifyInto(v, out.Data().([]float32), xs, dy)
	case []float64:
		rectifyInto(v, out.Data().([]float64), xs, dy)
	default:
		return nil, fmt.Errorf("%s: unsupported data %T", op, x.Data())
	}
	return out, nil
}

// rectifyInto writes x ⊙ (x ≥ 0) (dy nil) or dy ⊙ (x ≥ 0) into out, with
// the vector kernels of vecops variant v.
func rectifyInto[T float](v vecops.Variant, out, x []T, dy *tensor.Dense) {
	if dy == nil {
		vecops.ReLU(v, out, x)
		return
	}
	vecops.ReLUGrad(v, out, x, dy.Data().([]T))
}

// vecVariant is the vecops variant the ops compute with: the fastest this
// CPU runs, or the one RINGDDP_VECOPS names (a name the CPU cannot run
// is the op's error, as it is the optimizer's).
func vecVariant(op string) (vecops.Variant, error) {
	v, err := vecops.Best()
	if err != nil {
		return v, fmt.Errorf("%s: %w", op, err)
	}
	return v, nil
}

// denseOf returns v as a contiguous dense tensor (views materialised).
func denseOf(op, what string, v G.Value) (*tensor.Dense, error) {
	t, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%s: %s is %T, want *tensor.Dense", op, what, v)
	}
	if t.RequiresIterator() {
		t = t.Materialize().(*tensor.Dense)
	}
	if t.DataSize() < t.Shape().TotalSize() {
		return nil, fmt.Errorf("%s: %s has %d elements, shape %v needs %d", op, what, t.DataSize(), t.Shape(), t.Shape().TotalSize())
	}
	return t, nil
}
