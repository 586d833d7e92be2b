package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/tensor"
)

// hostMem is host memory posing as a tensor.Memory: TensorSlice and
// NewTensor never read the elements, so their arithmetic can be checked
// without a GPU.
type hostMem []float32

func (m hostMem) Uintptr() uintptr { return uintptr(unsafe.Pointer(&m[0])) }
func (m hostMem) MemSize() uintptr { return uintptr(4 * len(m)) }

func TestTensorSlice(t *testing.T) {
	mem := make(hostMem, 24)
	d, err := NewTensor(mem, tensor.Float32, 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	s, err := TensorSlice(d)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ptr != mem.Uintptr() || s.Len != 24 || s.DType != allreduce.Float32 {
		t.Fatalf("TensorSlice = %v, want 24×float32 at %#x", s, mem.Uintptr())
	}
	// A contiguous view: rows 1..2.
	v, err := d.Slice(tensor.S(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	s, err = TensorSlice(v)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ptr != uintptr(unsafe.Pointer(&mem[6])) || s.Len != 12 {
		t.Fatalf("view: %v, want 12×float32 at %#x", s, uintptr(unsafe.Pointer(&mem[6])))
	}
	// A strided view is refused.
	col, err := d.Slice(nil, tensor.S(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TensorSlice(col); !errors.Is(err, allreduce.ErrInvalid) {
		t.Fatalf("strided view: err %v, want ErrInvalid", err)
	}
	// Unsupported dtype, too little memory.
	if _, err := NewTensor(mem, tensor.Uint8, 4); !errors.Is(err, allreduce.ErrInvalid) {
		t.Errorf("uint8: err %v", err)
	}
	if _, err := NewTensor(mem, tensor.Float64, 24); !errors.Is(err, allreduce.ErrInvalid) {
		t.Errorf("too big: err %v", err)
	}
	// A host tensor of another dtype.
	if _, err := TensorSlice(tensor.New(tensor.WithShape(2), tensor.Of(tensor.Bool))); !errors.Is(err, allreduce.ErrInvalid) {
		t.Errorf("bool: err %v", err)
	}
}
