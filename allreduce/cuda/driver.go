//go:build cuda

package cuda

// The few driver calls gorgonia.org/cu v0.9.4 lacks (the primary context)
// or gets wrong (its DevicePtr.PtrAttribute passes a nil result pointer).

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

static CUresult rd_primary_retain(int ordinal, CUdevice* dev, CUcontext* ctx) {
	CUresult r = cuDeviceGet(dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	return cuDevicePrimaryCtxRetain(ctx, *dev);
}

static CUresult rd_primary_release(CUdevice dev) { return cuDevicePrimaryCtxRelease(dev); }

static CUresult rd_set_current(CUcontext ctx) { return cuCtxSetCurrent(ctx); }

static CUresult rd_pointer_info(CUdeviceptr p, unsigned int* memtype, int* ordinal) {
	CUresult r = cuPointerGetAttribute(memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
	if (r != CUDA_SUCCESS) return r;
	return cuPointerGetAttribute(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
}

static const char* rd_error_name(CUresult r) {
	const char* s = 0;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == 0) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

func cuErr(what string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (%d)", what, C.GoString(C.rd_error_name(r)), int(r))
}

// retainPrimary retains device ordinal's primary context: the one the CUDA
// runtime (PyTorch, CuPy) uses too, so their allocations are valid here.
func retainPrimary(ordinal int) (cu.Device, cu.CUContext, error) {
	var dev C.CUdevice
	var ctx C.CUcontext
	if err := cuErr("cuDevicePrimaryCtxRetain", C.rd_primary_retain(C.int(ordinal), &dev, &ctx)); err != nil {
		return 0, cu.CUContext{}, err
	}
	// cu.CUContext is struct{ ctx C.CUcontext }: the same one pointer.
	return cu.Device(dev), *(*cu.CUContext)(unsafe.Pointer(&ctx)), nil
}

func releasePrimary(dev cu.Device) error {
	return cuErr("cuDevicePrimaryCtxRelease", C.rd_primary_release(C.CUdevice(dev)))
}

func setCurrent(ctx cu.CUContext) error {
	c := *(*C.CUcontext)(unsafe.Pointer(&ctx))
	return cuErr("cuCtxSetCurrent", C.rd_set_current(c))
}

// pointerDevice returns the ordinal of the device whose memory p is, or an
// error if p is not device memory (host, managed or unknown to CUDA).
func pointerDevice(p uintptr) (int, error) {
	var memtype C.uint
	var ordinal C.int
	if r := C.rd_pointer_info(C.CUdeviceptr(p), &memtype, &ordinal); r != C.CUDA_SUCCESS {
		return -1, fmt.Errorf("%#x is not CUDA memory: %w", p, cuErr("cuPointerGetAttribute", r))
	}
	if memtype != C.CU_MEMORYTYPE_DEVICE {
		return -1, fmt.Errorf("%#x is not device memory (memory type %d)", p, int(memtype))
	}
	return int(ordinal), nil
}
