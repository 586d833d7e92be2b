//go:build cuda

package cuda

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/tensor"
)

// The tensor forms of the device collectives: allreduce.AllReduceTensor
// and friends for tensors whose memory is on the GPU (TensorSlice). The
// memory must be device memory of the Comm's GPU in its primary context
// (cuMemAlloc there, this package's Alloc, or a gorgonia CUDA engine made
// on Device.Context()); it is checked with cuPointerGetAttribute, and
// never copied to the host.

// deviceSlice is t's elements, checked to be memory of c's device.
func (c *Comm) deviceSlice(t tensor.Tensor) (Slice, error) {
	s, err := TensorSlice(t)
	if err != nil || s.Len == 0 {
		return s, err
	}
	var ord int
	err = c.w.dev.do(func() error {
		ord, err = pointerDevice(s.Ptr)
		return err
	})
	if err != nil {
		return Slice{}, fmt.Errorf("%w: tensor memory: %v", allreduce.ErrInvalid, err)
	}
	if ord != c.w.dev.ordinal {
		return Slice{}, fmt.Errorf("%w: tensor memory is on GPU %d, the collective on GPU %d", allreduce.ErrInvalid, ord, c.w.dev.ordinal)
	}
	return s, nil
}

// AllReduceTensor is Comm.AllReduce on a device tensor.
func AllReduceTensor(ctx context.Context, c *Comm, t tensor.Tensor, op allreduce.ReduceOp) error {
	s, err := c.deviceSlice(t)
	if err != nil {
		return err
	}
	return c.AllReduce(ctx, s, op)
}

// AllReduceTensorAsync enqueues AllReduceTensor on c's stream.
func AllReduceTensorAsync(ctx context.Context, c *Comm, t tensor.Tensor, op allreduce.ReduceOp) error {
	s, err := c.deviceSlice(t)
	if err != nil {
		return err
	}
	return c.AllReduceAsync(ctx, s, op)
}

// ReduceScatterTensor is Comm.ReduceScatter on device tensors: dst gets
// rank r's chunk of src's elements in logical (row-major) order.
func ReduceScatterTensor(ctx context.Context, c *Comm, dst, src tensor.Tensor, op allreduce.ReduceOp) error {
	d, err := c.deviceSlice(dst)
	if err != nil {
		return err
	}
	s, err := c.deviceSlice(src)
	if err != nil {
		return err
	}
	return c.ReduceScatter(ctx, d, s, op)
}

// AllGatherTensor is Comm.AllGather on device tensors.
func AllGatherTensor(ctx context.Context, c *Comm, dst, src tensor.Tensor) error {
	d, err := c.deviceSlice(dst)
	if err != nil {
		return err
	}
	s, err := c.deviceSlice(src)
	if err != nil {
		return err
	}
	return c.AllGather(ctx, d, s)
}
