package cuda

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/tensor"
)

// The tensor forms of the device collectives: allreduce.AllReduceTensor
// and friends for tensors whose memory is on the GPU (TensorSlice). The
// memory must be usable by the Comm's kernels: device memory allocated in
// the Comm's own context (this package's Alloc, or cuMemAlloc/cudaMalloc
// in the device's primary context, which PyTorch and CuPy use), or
// managed memory (cuMemAllocManaged), which every context of the process
// may use. It is checked by context, not by device ordinal: memory of
// another context on the same GPU (a gorgonia v0.9.18 CUDA engine makes a
// context of its own with cuCtxCreate) would pass an ordinal check and
// then fault. Memory is never copied to the host.

// deviceSlice is t's elements, checked to be memory c's kernels may use.
func (c *Comm) deviceSlice(t tensor.Tensor) (Slice, error) {
	s, err := TensorSlice(t)
	if err != nil || s.Len == 0 {
		return s, err
	}
	if err := c.w.dev.checkMemory(s); err != nil {
		return Slice{}, err
	}
	return s, nil
}

// checkMemory refuses s unless it is memory this device's kernels may
// read and write: allocated in its context, or managed.
func (d *Device) checkMemory(s Slice) error {
	info, err := d.b.pointerInfo(s.Ptr)
	if err != nil {
		return fmt.Errorf("%w: tensor memory %v: %v", allreduce.ErrInvalid, s, err)
	}
	last, err := d.b.pointerInfo(s.Ptr + uintptr(s.Bytes()) - 1)
	if err != nil || last != info {
		return fmt.Errorf("%w: tensor memory %v runs past the device memory it starts in", allreduce.ErrInvalid, s)
	}
	switch {
	case info.managed:
		return nil
	case info.context != d.b.contextID():
		return fmt.Errorf("%w: tensor memory %v belongs to CUDA context %#x on GPU %d; the collective runs in context %#x on GPU %d (allocate it in Device.Context(), the primary context, or as managed memory)",
			allreduce.ErrInvalid, s, info.context, info.device, d.b.contextID(), d.ordinal)
	}
	return nil
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
