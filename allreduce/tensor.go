package allreduce

import (
	"context"
	"fmt"

	"gorgonia.org/tensor"
)

// Tensor forms of the in-place collectives, for gorgonia tensors of any
// shape and of dtype float32, float64, int32 or int64. A contiguous tensor
// is reduced in place in its backing array. A view that needs an iterator
// (a transpose, a strided slice) is gathered into a contiguous copy in
// logical (row-major) order, reduced, and scattered back through the same
// iterator, so ranks may hold differently laid out tensors of one shape.

// AllReduceTensor is AllReduce on t.
func AllReduceTensor(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp) error {
	return inPlace(t, func(buf any) error {
		switch b := buf.(type) {
		case []float32:
			return AllReduce(ctx, g, b, op)
		case []float64:
			return AllReduce(ctx, g, b, op)
		case []int32:
			return AllReduce(ctx, g, b, op)
		default:
			return AllReduce(ctx, g, b.([]int64), op)
		}
	})
}

// BroadcastTensor is Broadcast on t.
func BroadcastTensor(ctx context.Context, g *Group, t tensor.Tensor, root int) error {
	return inPlace(t, func(buf any) error {
		switch b := buf.(type) {
		case []float32:
			return Broadcast(ctx, g, b, root)
		case []float64:
			return Broadcast(ctx, g, b, root)
		case []int32:
			return Broadcast(ctx, g, b, root)
		default:
			return Broadcast(ctx, g, b.([]int64), root)
		}
	})
}

// ReduceTensor is Reduce on t.
func ReduceTensor(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp, root int) error {
	return inPlace(t, func(buf any) error {
		switch b := buf.(type) {
		case []float32:
			return Reduce(ctx, g, b, op, root)
		case []float64:
			return Reduce(ctx, g, b, op, root)
		case []int32:
			return Reduce(ctx, g, b, op, root)
		default:
			return Reduce(ctx, g, b.([]int64), op, root)
		}
	})
}

// AllReduceTensorAsync starts AllReduceTensor; a view is written back
// before the Work completes.
func AllReduceTensorAsync(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp) *Work {
	w := newWork()
	var inner *Work
	err := inPlace(t, func(buf any) error {
		switch b := buf.(type) {
		case []float32:
			inner = AllReduceAsync(ctx, g, b, op)
		case []float64:
			inner = AllReduceAsync(ctx, g, b, op)
		case []int32:
			inner = AllReduceAsync(ctx, g, b, op)
		default:
			inner = AllReduceAsync(ctx, g, b.([]int64), op)
		}
		<-inner.Done()
		return inner.Err()
	}, withAsync(w))
	if err != nil && inner == nil {
		w.finish(err)
	}
	return w
}

type inPlaceOpts struct{ async *Work }

func withAsync(w *Work) func(*inPlaceOpts) { return func(o *inPlaceOpts) { o.async = w } }

// inPlace runs collective on a contiguous []T holding t's elements in
// logical order and makes the result t's new contents. With withAsync the
// collective and write-back run on a goroutine that finishes the Work; the
// returned error is then only a validation error.
func inPlace(t tensor.Tensor, collective func(buf any) error, opts ...func(*inPlaceOpts)) error {
	var o inPlaceOpts
	for _, f := range opts {
		f(&o)
	}
	d, ok := t.(*tensor.Dense)
	if !ok || d == nil {
		return fmt.Errorf("%w: tensor of type %T (want a *tensor.Dense)", ErrInvalid, t)
	}
	var run func() error
	switch d.Dtype() {
	case tensor.Float32:
		run = viewRunner[float32](d, collective)
	case tensor.Float64:
		run = viewRunner[float64](d, collective)
	case tensor.Int32:
		run = viewRunner[int32](d, collective)
	case tensor.Int64:
		run = viewRunner[int64](d, collective)
	default:
		return fmt.Errorf("%w: tensor dtype %v (want float32, float64, int32 or int64)", ErrInvalid, d.Dtype())
	}
	if o.async == nil {
		return run()
	}
	go func() { o.async.finish(run()) }()
	return nil
}

// viewRunner prepares the contiguous buffer for d and returns the function
// that runs the collective on it and writes it back.
func viewRunner[T Numeric](d *tensor.Dense, collective func(buf any) error) func() error {
	size := d.Shape().TotalSize()
	if d.IsScalar() {
		buf := []T{d.Data().(T)}
		return func() error {
			if err := collective(buf); err != nil {
				return err
			}
			d.Set(0, buf[0])
			return nil
		}
	}
	backing := d.Data().([]T)
	if !d.RequiresIterator() {
		buf := backing[:size:size]
		return func() error { return collective(buf) }
	}
	buf := make([]T, 0, size)
	it := d.Iterator()
	for i, err := it.Start(); err == nil; i, err = it.Next() {
		buf = append(buf, backing[i])
	}
	return func() error {
		if err := collective(buf); err != nil {
			return err
		}
		it.Reset()
		k := 0
		for i, err := it.Start(); err == nil && k < len(buf); i, err = it.Next() {
			backing[i] = buf[k]
			k++
		}
		return nil
	}
}
