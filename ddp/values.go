package ddp

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// paramValues checks the parameters and returns their dense values.
func paramValues[T Float](params G.Nodes) ([]*tensor.Dense, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("ddp: no parameters to wrap")
	}
	want := dtypeOf[T]()
	seen := make(map[*G.Node]bool, len(params))
	out := make([]*tensor.Dense, len(params))
	for i, p := range params {
		if p == nil {
			return nil, fmt.Errorf("ddp: parameter %d is nil", i)
		}
		if seen[p] {
			return nil, fmt.Errorf("ddp: parameter %d (%s) is listed twice", i, p.Name())
		}
		seen[p] = true
		v, ok := p.Value().(*tensor.Dense)
		if !ok || v == nil {
			return nil, fmt.Errorf("ddp: parameter %d (%s) has no dense value (got %T)", i, p.Name(), p.Value())
		}
		if v.Dtype() != want {
			return nil, fmt.Errorf("ddp: parameter %d (%s) is %v, wrapper is %v", i, p.Name(), v.Dtype(), want)
		}
		out[i] = v
	}
	return out, nil
}

func dtypeOf[T Float]() tensor.Dtype {
	var z T
	if _, ok := any(z).(float32); ok {
		return tensor.Float32
	}
	return tensor.Float64
}

// denseData returns v's elements in logical order: its backing slice when
// contiguous, else a copy.
func denseData[T Float](v G.Value) ([]T, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("value is %T, want *tensor.Dense", v)
	}
	size := d.Shape().TotalSize()
	if d.IsScalar() {
		x, ok := d.Data().(T)
		if !ok {
			return nil, fmt.Errorf("value dtype %v", d.Dtype())
		}
		return []T{x}, nil
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	data, ok := d.Data().([]T)
	if !ok {
		return nil, fmt.Errorf("value dtype %v", d.Dtype())
	}
	return data[:size], nil
}

// copyInto copies v's elements into dst (same count).
func copyInto[T Float](dst []T, v G.Value) error {
	src, err := denseData[T](v)
	if err != nil {
		return err
	}
	if len(src) != len(dst) {
		return fmt.Errorf("%d elements, want %d", len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// accumulateInto copies (add false) or adds (add true) v into dst.
func accumulateInto[T Float](dst []T, v G.Value, add bool) error {
	if !add {
		return copyInto(dst, v)
	}
	src, err := denseData[T](v)
	if err != nil {
		return err
	}
	if len(src) != len(dst) {
		return fmt.Errorf("%d elements, want %d", len(src), len(dst))
	}
	for i := range dst {
		dst[i] += src[i]
	}
	return nil
}
