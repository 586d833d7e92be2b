package models

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
)

// locked runs build, which adds nodes to a graph, under graphlock.
func locked(build func() (*G.Node, error)) (*G.Node, error) {
	var out *G.Node
	err := graphlock.Do(func() error {
		var err error
		out, err = build()
		return err
	})
	return out, err
}

// floatDo is an op's Do: it checks that vals are arity values and runs
// f32 or f64 by their dtype.
func floatDo[O any](name string, arity int, op O, vals []G.Value, f32, f64 func(O, []G.Value) (G.Value, error)) (G.Value, error) {
	if len(vals) != arity {
		return nil, fmt.Errorf("%s: want %d inputs, got %d", name, arity, len(vals))
	}
	switch vals[0].Dtype() {
	case tensor.Float32:
		return f32(op, vals)
	case tensor.Float64:
		return f64(op, vals)
	}
	return nil, fmt.Errorf("%s: unsupported dtype %v", name, vals[0].Dtype())
}

// scratch is an op's working memory of either float type (column matrices),
// kept from run to run and grown when a run needs more.
type scratch struct {
	f32 []float32
	f64 []float64
}

// scratchOf returns n elements of s as T (contents unspecified).
func scratchOf[T float](s *scratch, n int) []T {
	var out any
	switch any(T(0)).(type) {
	case float32:
		s.f32 = grown(s.f32, n)
		out = s.f32[:n]
	default:
		s.f64 = grown(s.f64, n)
		out = s.f64[:n]
	}
	return out.([]T)
}

// grown returns s, or a new slice when s has fewer than n elements.
func grown[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	return s[:n]
}

// shaped returns the buffer b with shape s and dtype dt (outBuffer.like for
// a shape that no input has).
func shaped(b *outBuffer, s tensor.Shape, dt tensor.Dtype) *tensor.Dense {
	if b.t == nil || b.t.Dtype() != dt || b.t.DataSize() != s.TotalSize() {
		b.t = tensor.New(tensor.WithShape(s.Clone()...), tensor.Of(dt))
	} else if !b.t.Shape().Eq(s) {
		if err := b.t.Reshape(s.Clone()...); err != nil {
			b.t = tensor.New(tensor.WithShape(s.Clone()...), tensor.Of(dt))
		}
	}
	return b.t
}

// dataOf returns the first size elements of a value as T: a dense float
// tensor of dtype T (views materialised) with exactly size elements in its
// shape.
func dataOf[T float](op, what string, v G.Value, size int) ([]T, error) {
	t, err := denseOf(op, what, v)
	if err != nil {
		return nil, err
	}
	if n := t.Shape().TotalSize(); n != size {
		return nil, fmt.Errorf("%s: %s has shape %v (%d elements), want %d elements", op, what, t.Shape(), n, size)
	}
	d, ok := t.Data().([]T)
	if !ok {
		return nil, fmt.Errorf("%s: %s data is %T, want %T", op, what, t.Data(), []T(nil))
	}
	return d[:size], nil
}

// tensor4 is the hm type of a 4-dimensional tensor with element type a.
func tensor4(a hm.Type) hm.Type { return &G.TensorType{Dims: 4, Of: a} }
