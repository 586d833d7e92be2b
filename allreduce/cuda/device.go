package cuda

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
)

// Device is one GPU as this package uses it: one context, the reduction
// kernels loaded into it, a stream of its own for host transfers, and
// the allocations made through it. Open (`ringddp_cuda` tag) makes one on
// a CUDA GPU, NewHostDevice one on host memory. Its methods may be called
// from any goroutine.
type Device struct {
	b       backend
	ordinal int

	mu       sync.Mutex // serialises the transfer stream's users
	transfer stream     // Upload and Download's stream
}

func newDevice(b backend, ordinal int) (*Device, error) {
	s, err := b.newStream()
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("cuda: the transfer stream: %w", err)
	}
	return &Device{b: b, ordinal: ordinal, transfer: s}, nil
}

// Close releases the transfer stream and the context. Buffers, Worlds and
// tensors of the device must be gone.
func (d *Device) Close() error {
	err := d.transfer.destroy()
	if e := d.b.close(); err == nil {
		err = e
	}
	return err
}

// Ordinal is the GPU's index; Name its name; Multiprocessors its SM
// count; Context the handle of its context (a CUcontext on CUDA: the
// device's primary context, the one the CUDA runtime, PyTorch and CuPy
// use).
func (d *Device) Ordinal() int         { return d.ordinal }
func (d *Device) Name() string         { return d.b.name() }
func (d *Device) Multiprocessors() int { return d.b.multiprocessors() }
func (d *Device) Context() uintptr     { return d.b.contextID() }

// Buffer is device memory allocated by Alloc. It is a tensor.Memory
// (Uintptr, MemSize), so tensor.FromMemory can put a gorgonia tensor on it
// (NewTensor).
type Buffer struct {
	dev   *Device
	ptr   uintptr
	bytes int
}

// Alloc allocates bytes of device memory (on CUDA cuMemAlloc: 256-byte
// aligned).
func (d *Device) Alloc(bytes int) (*Buffer, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("%w: allocating %d bytes", allreduce.ErrInvalid, bytes)
	}
	b := &Buffer{dev: d, bytes: bytes}
	if bytes == 0 {
		return b, nil
	}
	p, err := d.b.alloc(bytes)
	if err != nil {
		return nil, fmt.Errorf("cuda: allocating %d bytes: %w", bytes, err)
	}
	b.ptr = p
	return b, nil
}

// Free releases the memory. Work that uses it must be complete.
func (b *Buffer) Free() error {
	if b.ptr == 0 {
		return nil
	}
	err := b.dev.b.free(b.ptr)
	b.ptr = 0
	return err
}

func (b *Buffer) Device() *Device  { return b.dev }
func (b *Buffer) Bytes() int       { return b.bytes }
func (b *Buffer) Uintptr() uintptr { return b.ptr }
func (b *Buffer) MemSize() uintptr { return uintptr(b.bytes) }

// Slice is the buffer's memory as n elements of dt from element off.
func (b *Buffer) Slice(dt allreduce.DType, off, n int) Slice {
	if off < 0 || n < 0 || (off+n)*dt.Size() > b.bytes {
		panic(fmt.Sprintf("cuda: Buffer.Slice(%v, %d, %d) of %d bytes", dt, off, n, b.bytes))
	}
	return Slice{Ptr: b.ptr + uintptr(off*dt.Size()), Len: n, DType: dt}
}

// Upload copies host elements into s and returns once they are in device
// memory: the copy runs on the device's transfer stream, which Upload
// then waits for, so a collective enqueued after Upload returns, on any
// stream, reads the new values. (A plain synchronous copy would not do:
// CUDA's cuMemcpyHtoD from pageable memory may return before the data
// has landed, and the collectives' non-blocking streams do not wait for
// the legacy stream it runs on.) Comm.Upload puts the copy on a rank's
// own stream instead.
func Upload[T allreduce.Numeric](ctx context.Context, d *Device, s Slice, host []T) error {
	if err := checkHost[T](s, len(host)); err != nil {
		return err
	}
	return d.uploadBytes(ctx, s.Ptr, bytesOf(host))
}

// Download copies s into host elements once every stream has finished
// what it was given before (the copy runs on the transfer stream, so it
// does not wait for work of other streams: synchronise the collective's
// Comm first, or use Comm.Download).
func Download[T allreduce.Numeric](ctx context.Context, d *Device, host []T, s Slice) error {
	if err := checkHost[T](s, len(host)); err != nil {
		return err
	}
	return d.downloadBytes(ctx, bytesOf(host), s.Ptr)
}

func (d *Device) uploadBytes(ctx context.Context, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.b.uploadAsync(d.transfer, dst, src); err != nil {
		return fmt.Errorf("cuda: upload of %d bytes to %#x: %w", len(src), dst, err)
	}
	return syncStream(ctx, d.transfer, "the transfer stream")
}

func (d *Device) downloadBytes(ctx context.Context, dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.b.downloadAsync(d.transfer, dst, src); err != nil {
		return fmt.Errorf("cuda: download of %d bytes from %#x: %w", len(dst), src, err)
	}
	return syncStream(ctx, d.transfer, "the transfer stream")
}

func checkHost[T allreduce.Numeric](s Slice, n int) error {
	if allreduce.DTypeOf[T]() != s.DType || n != s.Len {
		return fmt.Errorf("%w: host slice of %d×%v for device %v", allreduce.ErrInvalid, n, allreduce.DTypeOf[T](), s)
	}
	return nil
}

func bytesOf[T allreduce.Numeric](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func elemsOf[T allreduce.Numeric](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}
