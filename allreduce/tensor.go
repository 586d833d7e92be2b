package allreduce

import (
	"context"
	"fmt"

	"gorgonia.org/tensor"
)

// Tensor forms of the in-place collectives, for gorgonia tensors
// (*tensor.Dense) of any shape and of dtype float32, float64, int32 or
// int64. A contiguous tensor, a contiguous view included, is reduced in
// place in its backing array. A view that needs an iterator (a transpose, a
// strided slice) is gathered into a contiguous copy in logical (row-major)
// order, reduced, and scattered back through the same iterator, so ranks
// may hold differently laid out tensors of one shape; elements of the
// backing array outside the view are not touched. A scalar is a
// collective of one element. gorgonia has no 16-bit float dtype: float16
// and bfloat16 collectives take []numeric.Float16 and []numeric.BFloat16.

// AllReduceTensor is AllReduce on t.
func AllReduceTensor(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp) error {
	return doTensor(ctx, g, t, call{kind: KindAllReduce, op: op, root: -1})
}

// BroadcastTensor is Broadcast on t.
func BroadcastTensor(ctx context.Context, g *Group, t tensor.Tensor, root int) error {
	return doTensor(ctx, g, t, call{kind: KindBroadcast, root: root})
}

// ReduceTensor is Reduce on t.
func ReduceTensor(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp, root int) error {
	return doTensor(ctx, g, t, call{kind: KindReduce, op: op, root: root})
}

// AllReduceTensorAsync starts AllReduceTensor and returns at once, taking
// its place in the group's order of collectives (like AllReduceAsync) before
// it returns. t belongs to the collective until the Work is done; a view is
// written back before that.
func AllReduceTensorAsync(ctx context.Context, g *Group, t tensor.Tensor, op ReduceOp) *Work {
	b, err := tensorBuffer(t)
	if err != nil {
		w := newWork()
		w.finish(err)
		return w
	}
	inner := g.start(ctx, b.call(call{kind: KindAllReduce, op: op, root: -1}))
	if b.writeBack == nil {
		return inner
	}
	w := newWork()
	go func() {
		<-inner.Done()
		err := inner.Err()
		if err == nil {
			b.writeBack()
		}
		w.finish(err)
	}()
	return w
}

// doTensor runs c on t's elements and writes the result back into t.
func doTensor(ctx context.Context, g *Group, t tensor.Tensor, c call) error {
	b, err := tensorBuffer(t)
	if err != nil {
		return err
	}
	c = b.call(c)
	if err := g.do(ctx, &c); err != nil {
		return err
	}
	if b.writeBack != nil {
		b.writeBack()
	}
	return nil
}

// tensorBuf is a tensor's elements, in logical order, as the contiguous
// buffer of a collective.
type tensorBuf struct {
	dt    DType
	count int
	buf   []byte
	// writeBack copies buf into the tensor; nil when buf is the tensor's
	// own storage.
	writeBack func()
}

// call is c on b's elements.
func (b tensorBuf) call(c call) call {
	c.dt, c.count, c.buf = b.dt, b.count, b.buf
	return c
}

// tensorBuffer returns t's elements as a collective's buffer.
func tensorBuffer(t tensor.Tensor) (tensorBuf, error) {
	d, ok := t.(*tensor.Dense)
	if !ok || d == nil {
		return tensorBuf{}, fmt.Errorf("%w: tensor of type %T (want a *tensor.Dense)", ErrInvalid, t)
	}
	switch d.Dtype() {
	case tensor.Float32:
		return denseBuffer[float32](d), nil
	case tensor.Float64:
		return denseBuffer[float64](d), nil
	case tensor.Int32:
		return denseBuffer[int32](d), nil
	case tensor.Int64:
		return denseBuffer[int64](d), nil
	}
	return tensorBuf{}, fmt.Errorf("%w: tensor dtype %v (want float32, float64, int32 or int64)", ErrInvalid, d.Dtype())
}

// denseBuffer is tensorBuffer for a tensor whose elements are T.
func denseBuffer[T Numeric](d *tensor.Dense) tensorBuf {
	dt := DTypeOf[T]()
	if d.IsScalar() {
		buf := []T{d.Data().(T)}
		return tensorBuf{dt: dt, count: 1, buf: asBytes(buf), writeBack: func() { d.Set(0, buf[0]) }}
	}
	size := d.Shape().TotalSize()
	backing := d.Data().([]T)
	if !d.RequiresIterator() {
		return tensorBuf{dt: dt, count: size, buf: asBytes(backing[:size:size])}
	}
	buf := make([]T, 0, size)
	it := d.Iterator()
	for i, err := it.Start(); err == nil; i, err = it.Next() {
		buf = append(buf, backing[i])
	}
	return tensorBuf{dt: dt, count: size, buf: asBytes(buf), writeBack: func() {
		it.Reset()
		k := 0
		for i, err := it.Start(); err == nil && k < len(buf); i, err = it.Next() {
			backing[i] = buf[k]
			k++
		}
	}}
}
