//go:build ringddp_cuda

package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
)

// The CUDA backend: one GPU's primary context (the one the CUDA runtime,
// and so PyTorch and CuPy, use), the kernels of the embedded PTX loaded
// into it, and the driver calls of the seam (backend.go). Every call runs
// on a locked OS thread with the context current.

type cudaBackend struct {
	api     *driverAPI
	ordinal int
	dev     int32
	ctx     uintptr
	mod     uintptr
	fns     map[string]uintptr
	sms     int
	devName string
}

// Open retains GPU ordinal's primary context and loads the kernels (the
// embedded PTX, JIT-compiled by the driver for this GPU; a JIT failure
// comes back with the JIT's log).
func Open(ordinal int) (*Device, error) {
	api, err := loadDriver()
	if err != nil {
		return nil, err
	}
	if err := api.err("cuInit", api.cuInit(0)); err != nil {
		return nil, err
	}
	var n int32
	if err := api.err("cuDeviceGetCount", api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(n) {
		return nil, fmt.Errorf("%w: GPU %d of %d", allreduce.ErrInvalid, ordinal, n)
	}
	b := &cudaBackend{api: api, ordinal: ordinal, fns: map[string]uintptr{}}
	if err := api.err("cuDeviceGet", api.cuDeviceGet(&b.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := api.err("cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain(&b.ctx, b.dev)); err != nil {
		return nil, err
	}
	if err := b.do(b.load); err != nil {
		_ = api.cuDevicePrimaryCtxRelease(b.dev)
		return nil, err
	}
	return newDevice(b, ordinal)
}

// DriverVersion is the CUDA version the installed driver supports
// (1000·major + 10·minor), or an error where there is no driver.
func DriverVersion() (int, error) {
	api, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var v int32
	return int(v), api.err("cuDriverGetVersion", api.cuDriverGetVersion(&v))
}

// load reads the device's name and SM count and loads the kernels.
func (b *cudaBackend) load() error {
	api := b.api
	name := make([]byte, 256)
	if err := api.err("cuDeviceGetName", api.cuDeviceGetName(&name[0], int32(len(name)), b.dev)); err != nil {
		return err
	}
	b.devName = strings.TrimRight(string(name), "\x00")
	var sms, major, minor int32
	for _, a := range []struct {
		v    *int32
		attr int32
	}{{&sms, cuDevAttrMultiprocessorCount}, {&major, cuDevAttrComputeMajor}, {&minor, cuDevAttrComputeMinor}} {
		if err := api.err("cuDeviceGetAttribute", api.cuDeviceGetAttribute(a.v, a.attr, b.dev)); err != nil {
			return err
		}
	}
	b.sms = int(sms)
	b.devName = fmt.Sprintf("%s (sm_%d%d)", b.devName, major, minor)
	if err := b.loadModule(); err != nil {
		return err
	}
	for _, k := range kernelNames() {
		var fn uintptr
		cname := append([]byte(k), 0)
		if err := api.err("cuModuleGetFunction("+k+")", api.cuModuleGetFunction(&fn, b.mod, &cname[0])); err != nil {
			return err
		}
		b.fns[k] = fn
	}
	return nil
}

// loadModule JIT-compiles the PTX with the driver's error and info logs
// captured, and puts the logs into the error when it fails.
func (b *cudaBackend) loadModule() error {
	const logSize = 16 << 10
	errLog, infoLog := make([]byte, logSize), make([]byte, logSize)
	opts := []int32{cuJitErrorLogBuffer, cuJitErrorLogBufferSize, cuJitInfoLogBuffer, cuJitInfoLogBufferSize, cuJitLogVerbose}
	vals := []uintptr{
		uintptr(unsafe.Pointer(&errLog[0])), logSize,
		uintptr(unsafe.Pointer(&infoLog[0])), logSize,
		1,
	}
	image := append([]byte(reducePTX), 0)
	r := b.api.cuModuleLoadDataEx(&b.mod, &image[0], uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(errLog)
	runtime.KeepAlive(infoLog)
	if err := b.api.err("cuModuleLoadDataEx (JIT of the embedded PTX)", r); err != nil {
		cut := func(l []byte) string { return strings.TrimSpace(strings.TrimRight(string(l), "\x00")) }
		return fmt.Errorf("%w\nJIT error log:\n%s\nJIT info log:\n%s", err, cut(errLog), cut(infoLog))
	}
	return nil
}

// do runs f with the context current on a locked OS thread.
func (b *cudaBackend) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.api.err("cuCtxSetCurrent", b.api.cuCtxSetCurrent(b.ctx)); err != nil {
		return err
	}
	return f()
}

func (b *cudaBackend) call(what string, f func() cuResult) error {
	return b.do(func() error { return b.api.err(what, f()) })
}

func (b *cudaBackend) name() string         { return b.devName }
func (b *cudaBackend) multiprocessors() int { return b.sms }
func (b *cudaBackend) contextID() uintptr   { return b.ctx }

func (b *cudaBackend) close() error {
	err := b.call("cuModuleUnload", func() cuResult { return b.api.cuModuleUnload(b.mod) })
	if e := b.api.err("cuDevicePrimaryCtxRelease", b.api.cuDevicePrimaryCtxRelease(b.dev)); err == nil {
		err = e
	}
	return err
}

func (b *cudaBackend) alloc(bytes int) (uintptr, error) {
	var p uint64
	err := b.call("cuMemAlloc", func() cuResult { return b.api.cuMemAlloc(&p, uint64(bytes)) })
	return uintptr(p), err
}

func (b *cudaBackend) free(p uintptr) error {
	return b.call("cuMemFree", func() cuResult { return b.api.cuMemFree(uint64(p)) })
}

// pointerInfo asks the driver what p is (cuPointerGetAttribute).
func (b *cudaBackend) pointerInfo(p uintptr) (memInfo, error) {
	var info memInfo
	err := b.do(func() error {
		api := b.api
		var memType, managed uint32
		var ordinal int32
		var ctx uintptr
		if err := api.err("cuPointerGetAttribute(MEMORY_TYPE)", api.cuPointerGetAttribute(unsafe.Pointer(&memType), cuPointerAttrMemoryType, uint64(p))); err != nil {
			return fmt.Errorf("%#x is not CUDA memory: %w", p, err)
		}
		if err := api.err("cuPointerGetAttribute(IS_MANAGED)", api.cuPointerGetAttribute(unsafe.Pointer(&managed), cuPointerAttrIsManaged, uint64(p))); err != nil {
			return err
		}
		if err := api.err("cuPointerGetAttribute(DEVICE_ORDINAL)", api.cuPointerGetAttribute(unsafe.Pointer(&ordinal), cuPointerAttrDeviceOrdinal, uint64(p))); err != nil {
			return err
		}
		info.managed, info.device = managed != 0, int(ordinal)
		if info.managed {
			return nil
		}
		if memType != cuMemoryTypeDevice {
			return fmt.Errorf("%#x is not device memory (CUDA memory type %d)", p, memType)
		}
		if err := api.err("cuPointerGetAttribute(CONTEXT)", api.cuPointerGetAttribute(unsafe.Pointer(&ctx), cuPointerAttrContext, uint64(p))); err != nil {
			return err
		}
		info.context = ctx
		return nil
	})
	return info, err
}
