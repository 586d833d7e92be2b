//go:build ringddp_cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The CUDA driver API, loaded at run time: libcuda.so.1 (the NVIDIA
// driver's library) is opened with dlopen by github.com/ebitengine/purego
// and the entry points below are bound to Go functions, so the package
// needs no cgo, no cuda.h and no CUDA toolkit to build, and a binary
// built with the tag starts on a machine without a driver (Open then
// returns an error naming the library). Versioned names (_v2) are the
// ones cuda.h's macros select since CUDA 11.
//
// Every entry point returns a CUresult; 0 is CUDA_SUCCESS.

// cuResult is a CUresult.
type cuResult int32

const (
	cuSuccess  cuResult = 0
	cuNotReady cuResult = 600 // CUDA_ERROR_NOT_READY
)

// Enum values of cuda.h used here.
const (
	cuDevAttrMultiprocessorCount = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	cuDevAttrComputeMajor        = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	cuDevAttrComputeMinor        = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	cuStreamNonBlocking          = 1  // CU_STREAM_NON_BLOCKING
	cuEventDisableTiming         = 2  // CU_EVENT_DISABLE_TIMING
	cuPointerAttrContext         = 1  // CU_POINTER_ATTRIBUTE_CONTEXT
	cuPointerAttrMemoryType      = 2  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
	cuPointerAttrIsManaged       = 8  // CU_POINTER_ATTRIBUTE_IS_MANAGED
	cuPointerAttrDeviceOrdinal   = 9  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
	cuMemoryTypeDevice           = 2  // CU_MEMORYTYPE_DEVICE
	cuJitInfoLogBuffer           = 3  // CU_JIT_INFO_LOG_BUFFER
	cuJitInfoLogBufferSize       = 4  // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	cuJitErrorLogBuffer          = 5  // CU_JIT_ERROR_LOG_BUFFER
	cuJitErrorLogBufferSize      = 6  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	cuJitLogVerbose              = 12 // CU_JIT_LOG_VERBOSE
)

// driverAPI is libcuda's entry points as Go functions.
type driverAPI struct {
	lib uintptr

	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(v *int32) cuResult
	cuGetErrorName            func(r cuResult, s **byte) cuResult
	cuGetErrorString          func(r cuResult, s **byte) cuResult
	cuDeviceGetCount          func(n *int32) cuResult
	cuDeviceGet               func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, n int32, dev int32) cuResult
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRelease func(dev int32) cuResult
	cuCtxSetCurrent           func(ctx uintptr) cuResult
	cuModuleLoadDataEx        func(mod *uintptr, image *byte, nopts uint32, opts *int32, vals *uintptr) cuResult
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name *byte) cuResult
	cuModuleUnload            func(mod uintptr) cuResult
	cuMemAlloc                func(p *uint64, bytes uint64) cuResult
	cuMemFree                 func(p uint64) cuResult
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uint64, s uintptr) cuResult
	cuMemcpyDtoDAsync         func(dst, src uint64, n uint64, s uintptr) cuResult
	cuPointerGetAttribute     func(data unsafe.Pointer, attr int32, p uint64) cuResult
	cuStreamCreate            func(s *uintptr, flags uint32) cuResult
	cuStreamDestroy           func(s uintptr) cuResult
	cuStreamQuery             func(s uintptr) cuResult
	cuStreamWaitEvent         func(s, e uintptr, flags uint32) cuResult
	cuEventCreate             func(e *uintptr, flags uint32) cuResult
	cuEventRecord             func(e, s uintptr) cuResult
	cuEventQuery              func(e uintptr) cuResult
	cuEventDestroy            func(e uintptr) cuResult
	cuEventElapsedTime        func(ms *float32, start, end uintptr) cuResult
	cuLaunchKernel            func(fn uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s uintptr, params, extra unsafe.Pointer) cuResult
}

// libcudaNames are the names tried, in order.
var libcudaNames = [...]string{"libcuda.so.1", "libcuda.so"}

// loadDriver opens libcuda and binds every entry point, or says which
// library or symbol is missing.
func loadDriver() (*driverAPI, error) {
	d := &driverAPI{}
	var errs []string
	for _, name := range libcudaNames {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			d.lib = h
			break
		}
		errs = append(errs, err.Error())
	}
	if d.lib == 0 {
		return nil, fmt.Errorf("cuda: no CUDA driver library (is the NVIDIA driver installed?): %v", errs)
	}
	syms := []struct {
		fn   any
		name string
	}{
		{&d.cuInit, "cuInit"}, {&d.cuDriverGetVersion, "cuDriverGetVersion"},
		{&d.cuGetErrorName, "cuGetErrorName"}, {&d.cuGetErrorString, "cuGetErrorString"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"}, {&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDeviceGetName, "cuDeviceGetName"}, {&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuModuleLoadDataEx, "cuModuleLoadDataEx"}, {&d.cuModuleGetFunction, "cuModuleGetFunction"},
		{&d.cuModuleUnload, "cuModuleUnload"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"}, {&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"}, {&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&d.cuPointerGetAttribute, "cuPointerGetAttribute"},
		{&d.cuStreamCreate, "cuStreamCreate"}, {&d.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&d.cuStreamQuery, "cuStreamQuery"}, {&d.cuStreamWaitEvent, "cuStreamWaitEvent"},
		{&d.cuEventCreate, "cuEventCreate"}, {&d.cuEventRecord, "cuEventRecord"},
		{&d.cuEventQuery, "cuEventQuery"}, {&d.cuEventDestroy, "cuEventDestroy_v2"},
		{&d.cuEventElapsedTime, "cuEventElapsedTime"}, {&d.cuLaunchKernel, "cuLaunchKernel"},
	}
	for _, s := range syms {
		addr, err := purego.Dlsym(d.lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("cuda: the driver library lacks %s (driver too old?): %w", s.name, err)
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return d, nil
}

// err turns r into an error naming the call (nil for CUDA_SUCCESS).
func (d *driverAPI) err(what string, r cuResult) error {
	if r == cuSuccess {
		return nil
	}
	if r == cuNotReady {
		return errNotReady
	}
	return &DriverError{Call: what, Code: int(r), Name: d.cString(d.cuGetErrorName, r), Text: d.cString(d.cuGetErrorString, r)}
}

func (d *driverAPI) cString(f func(cuResult, **byte) cuResult, r cuResult) string {
	var p *byte
	if f(r, &p) != cuSuccess || p == nil {
		return "unknown"
	}
	return goString(p)
}

// goString copies the NUL-terminated C string at p (the driver's static
// memory), at most 4 KiB of it.
func goString(p *byte) string {
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// DriverError is a failed CUDA driver call.
type DriverError struct {
	Call string // the entry point, cuMemAlloc_v2 for example
	Code int    // the CUresult
	Name string // CUDA_ERROR_...
	Text string // the driver's description
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Text)
}
