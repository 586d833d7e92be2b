package cuda

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// Slice is Len elements of type DType in device memory from address Ptr:
// the buffer of a device collective. It is a plain value (no reference to
// the memory's owner): a Slice of a Buffer is valid while the Buffer is.
type Slice struct {
	Ptr   uintptr
	Len   int
	DType allreduce.DType
}

// Bytes is the slice's size in bytes.
func (s Slice) Bytes() int { return s.Len * s.DType.Size() }

// Sub is elements [lo, hi) of s.
func (s Slice) Sub(lo, hi int) Slice {
	if lo < 0 || hi < lo || hi > s.Len {
		panic(fmt.Sprintf("cuda: Slice.Sub(%d, %d) of %d elements", lo, hi, s.Len))
	}
	return Slice{Ptr: s.Ptr + uintptr(lo*s.DType.Size()), Len: hi - lo, DType: s.DType}
}

func (s Slice) String() string {
	return fmt.Sprintf("%d×%v at %#x", s.Len, s.DType, s.Ptr)
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b Slice) bool {
	if a.Bytes() == 0 || b.Bytes() == 0 {
		return false
	}
	return a.Ptr < b.Ptr+uintptr(b.Bytes()) && b.Ptr < a.Ptr+uintptr(a.Bytes())
}
