package cuda

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/tensor"
)

// Gorgonia tensors in device memory. A *tensor.Dense whose storage is a
// device pointer — made by a gorgonia CUDA engine (its memory is the
// engine's cu.DevicePtr), or by NewTensor over this package's memory —
// is a collective's buffer as it is: its elements' address and count
// become a Slice, and the host never reads them. The tensor must be
// contiguous (a contiguous view included); a transposed or strided view
// is refused, since gathering it would need a kernel per layout.

// dtypes maps gorgonia's element types to the collectives'.
var dtypes = map[tensor.Dtype]allreduce.DType{
	tensor.Float32: allreduce.Float32,
	tensor.Float64: allreduce.Float64,
	tensor.Int32:   allreduce.Int32,
	tensor.Int64:   allreduce.Int64,
}

// TensorSlice returns t's elements as a Slice, without reading them.
func TensorSlice(t tensor.Tensor) (Slice, error) {
	d, ok := t.(*tensor.Dense)
	if !ok || d == nil {
		return Slice{}, fmt.Errorf("%w: tensor of type %T (want a *tensor.Dense)", allreduce.ErrInvalid, t)
	}
	dt, ok := dtypes[d.Dtype()]
	if !ok {
		return Slice{}, fmt.Errorf("%w: tensor dtype %v (want float32, float64, int32 or int64)", allreduce.ErrInvalid, d.Dtype())
	}
	if d.RequiresIterator() {
		return Slice{}, fmt.Errorf("%w: a device tensor must be contiguous (this one is a %v view with strides %v)", allreduce.ErrInvalid, d.Shape(), d.Strides())
	}
	n := d.Shape().TotalSize()
	if d.IsScalar() {
		n = 1
	}
	if n == 0 {
		return Slice{DType: dt}, nil
	}
	if int(d.MemSize()) < n*dt.Size() {
		return Slice{}, fmt.Errorf("%w: tensor of %d×%v over %d bytes of memory", allreduce.ErrInvalid, n, dt, d.MemSize())
	}
	return Slice{Ptr: d.Uintptr(), Len: n, DType: dt}, nil
}

// NewTensor returns a tensor of dtype dt and the given shape whose
// elements are mem's (device) memory, for the tensor collectives. Only
// device code may read or write the elements: the tensor's host methods
// (Data, At, String, arithmetic) would read a device address.
func NewTensor(mem tensor.Memory, dt tensor.Dtype, shape ...int) (*tensor.Dense, error) {
	adt, ok := dtypes[dt]
	if !ok {
		return nil, fmt.Errorf("%w: tensor dtype %v (want float32, float64, int32 or int64)", allreduce.ErrInvalid, dt)
	}
	n := tensor.Shape(shape).TotalSize()
	if n*adt.Size() > int(mem.MemSize()) || n == 0 {
		return nil, fmt.Errorf("%w: a %v tensor of %v needs %d bytes, the memory has %d", allreduce.ErrInvalid, dt, shape, n*adt.Size(), mem.MemSize())
	}
	return tensor.New(tensor.WithShape(shape...), tensor.Of(dt), tensor.FromMemory(mem.Uintptr(), uintptr(n*adt.Size()))), nil
}
