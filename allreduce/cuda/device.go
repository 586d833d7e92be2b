//go:build cuda

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/cu"
)

// Device is one GPU as this package uses it: its primary context, the
// reduction kernels loaded into it, and the allocations made through it.
// Its methods may be called from any goroutine: each call makes the
// context current on the calling thread for its duration.
type Device struct {
	ordinal int
	dev     cu.Device
	ctx     cu.CUContext
	mod     cu.Module
	fns     map[string]cu.Function
	sms     int
	name    string
}

// Open retains GPU ordinal's primary context and loads the kernels
// (the embedded PTX, JIT-compiled by the driver for this GPU).
func Open(ordinal int) (*Device, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: GPU %d of %d", allreduce.ErrInvalid, ordinal, n)
	}
	dev, ctx, err := retainPrimary(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{ordinal: ordinal, dev: dev, ctx: ctx, fns: map[string]cu.Function{}}
	err = d.do(func() error {
		if d.name, err = dev.Name(); err != nil {
			return fmt.Errorf("cuda: device name: %w", err)
		}
		if d.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
			return fmt.Errorf("cuda: multiprocessor count: %w", err)
		}
		if d.mod, err = cu.LoadData(reducePTX); err != nil {
			return fmt.Errorf("cuda: loading the kernels' PTX (cuModuleLoadData): %w", err)
		}
		for _, name := range kernelNames() {
			fn, err := d.mod.Function(name)
			if err != nil {
				return fmt.Errorf("cuda: kernel %s (cuModuleGetFunction): %w", name, err)
			}
			d.fns[name] = fn
		}
		return nil
	})
	if err != nil {
		_ = releasePrimary(dev)
		return nil, err
	}
	return d, nil
}

// Close unloads the kernels and releases the primary context. Buffers,
// Worlds and tensors of the device must be gone.
func (d *Device) Close() error {
	err := d.do(func() error { return d.mod.Unload() })
	if e := releasePrimary(d.dev); err == nil {
		err = e
	}
	return err
}

// Ordinal is the GPU's index; Name its name; Context its primary context
// (the one to give a gorgonia CUDA engine or cu.Ctx so that its tensors'
// memory is usable here).
func (d *Device) Ordinal() int          { return d.ordinal }
func (d *Device) Name() string          { return d.name }
func (d *Device) Context() cu.CUContext { return d.ctx }
func (d *Device) CUDevice() cu.Device   { return d.dev }
func (d *Device) Multiprocessors() int  { return d.sms }

// do runs f with the device's context current on a locked OS thread.
func (d *Device) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := setCurrent(d.ctx); err != nil {
		return err
	}
	return f()
}

// Do runs f with the device's context current on the calling goroutine's
// OS thread (locked for the call): for gorgonia.org/cu calls of the
// caller's own.
func (d *Device) Do(f func() error) error { return d.do(f) }

// Buffer is device memory allocated by Alloc. It is a tensor.Memory
// (Uintptr, MemSize), so tensor.FromMemory can put a gorgonia tensor on it
// (NewTensor).
type Buffer struct {
	dev   *Device
	ptr   cu.DevicePtr
	bytes int
}

// Alloc allocates bytes of device memory (cuMemAlloc: 256-byte aligned).
func (d *Device) Alloc(bytes int) (*Buffer, error) {
	b := &Buffer{dev: d, bytes: bytes}
	if bytes == 0 {
		return b, nil
	}
	err := d.do(func() error {
		var err error
		b.ptr, err = cu.MemAlloc(int64(bytes))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: allocating %d bytes: %w", bytes, err)
	}
	return b, nil
}

// Free releases the memory. Work that uses it must be complete.
func (b *Buffer) Free() error {
	if b.ptr == 0 {
		return nil
	}
	err := b.dev.do(func() error { return cu.MemFree(b.ptr) })
	b.ptr = 0
	return err
}

func (b *Buffer) Device() *Device   { return b.dev }
func (b *Buffer) Ptr() cu.DevicePtr { return b.ptr }
func (b *Buffer) Bytes() int        { return b.bytes }
func (b *Buffer) Uintptr() uintptr  { return uintptr(b.ptr) }
func (b *Buffer) MemSize() uintptr  { return uintptr(b.bytes) }

// Slice is the buffer's memory as n elements of dt from element off.
func (b *Buffer) Slice(dt allreduce.DType, off, n int) Slice {
	if off < 0 || n < 0 || (off+n)*dt.Size() > b.bytes {
		panic(fmt.Sprintf("cuda: Buffer.Slice(%v, %d, %d) of %d bytes", dt, off, n, b.bytes))
	}
	return Slice{Ptr: uintptr(b.ptr) + uintptr(off*dt.Size()), Len: n, DType: dt}
}

// Upload copies host elements into s (synchronously); Download the reverse.
func Upload[T allreduce.Numeric](d *Device, s Slice, host []T) error {
	if err := checkHost[T](s, len(host)); err != nil || len(host) == 0 {
		return err
	}
	return d.do(func() error {
		return cu.MemcpyHtoD(cu.DevicePtr(s.Ptr), unsafe.Pointer(unsafe.SliceData(host)), int64(s.Bytes()))
	})
}

// Download copies s into host elements (synchronously).
func Download[T allreduce.Numeric](d *Device, host []T, s Slice) error {
	if err := checkHost[T](s, len(host)); err != nil || len(host) == 0 {
		return err
	}
	return d.do(func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(host)), cu.DevicePtr(s.Ptr), int64(s.Bytes()))
	})
}

func checkHost[T allreduce.Numeric](s Slice, n int) error {
	if allreduce.DTypeOf[T]() != s.DType || n != s.Len {
		return fmt.Errorf("%w: host slice of %d×%v for device %v", allreduce.ErrInvalid, n, allreduce.DTypeOf[T](), s)
	}
	return nil
}

// launchReduce enqueues out = a op b (n elements) on stream.
func (d *Device) launchReduce(stream cu.Stream, name string, out, a, b uintptr, n int, nranks int) error {
	fn, ok := d.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %s not loaded", name)
	}
	const threads = 256
	perThread := 4 // elements a thread handles per vector access, about
	blocks := (n + threads*perThread - 1) / (threads * perThread)
	blocks = max(1, min(blocks, 32*d.sms))
	po, pa, pb, pn, pr := uint64(out), uint64(a), uint64(b), uint64(n), uint64(nranks)
	args := []unsafe.Pointer{unsafe.Pointer(&po), unsafe.Pointer(&pa), unsafe.Pointer(&pb), unsafe.Pointer(&pn), unsafe.Pointer(&pr)}
	if err := fn.Launch(blocks, 1, 1, threads, 1, 1, 0, stream, args); err != nil {
		return fmt.Errorf("cuda: launching %s: %w", name, err)
	}
	return nil
}

// LaunchNop enqueues the empty kernel on stream: the bare cost of a launch,
// for benchmarks. Call it inside Do.
func (d *Device) LaunchNop(stream cu.Stream) error {
	var z uint64
	return d.fns[nopKernel].Launch(1, 1, 1, 1, 1, 1, 0, stream, []unsafe.Pointer{unsafe.Pointer(&z)})
}
