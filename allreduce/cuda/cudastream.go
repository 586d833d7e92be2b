//go:build ringddp_cuda

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Streams, events, copies and launches of the CUDA backend.

type cudaStream struct {
	b *cudaBackend
	s uintptr
}

type cudaEvent struct {
	b *cudaBackend
	e uintptr
}

func (b *cudaBackend) newStream() (stream, error) {
	s := &cudaStream{b: b}
	err := b.call("cuStreamCreate", func() cuResult { return b.api.cuStreamCreate(&s.s, cuStreamNonBlocking) })
	return s, err
}

func (b *cudaBackend) newEvent(timing bool) (event, error) {
	e := &cudaEvent{b: b}
	flags := uint32(cuEventDisableTiming)
	if timing {
		flags = 0
	}
	err := b.call("cuEventCreate", func() cuResult { return b.api.cuEventCreate(&e.e, flags) })
	return e, err
}

func (s *cudaStream) handle() uintptr { return s.s }

func (s *cudaStream) query() error {
	return s.b.call("cuStreamQuery", func() cuResult { return s.b.api.cuStreamQuery(s.s) })
}

func (s *cudaStream) wait(ev event) error {
	e, ok := ev.(*cudaEvent)
	if !ok {
		return fmt.Errorf("cuda: %T is not a CUDA event", ev)
	}
	return s.b.call("cuStreamWaitEvent", func() cuResult { return s.b.api.cuStreamWaitEvent(s.s, e.e, 0) })
}

func (s *cudaStream) destroy() error {
	return s.b.call("cuStreamDestroy", func() cuResult { return s.b.api.cuStreamDestroy(s.s) })
}

func (e *cudaEvent) record(st stream) error {
	s, ok := st.(*cudaStream)
	if !ok {
		return fmt.Errorf("cuda: %T is not a CUDA stream", st)
	}
	return e.b.call("cuEventRecord", func() cuResult { return e.b.api.cuEventRecord(e.e, s.s) })
}

func (e *cudaEvent) query() error {
	return e.b.call("cuEventQuery", func() cuResult { return e.b.api.cuEventQuery(e.e) })
}

func (e *cudaEvent) elapsedSince(start event) (float64, error) {
	st, ok := start.(*cudaEvent)
	if !ok {
		return 0, fmt.Errorf("cuda: %T is not a CUDA event", start)
	}
	var ms float32
	err := e.b.call("cuEventElapsedTime", func() cuResult { return e.b.api.cuEventElapsedTime(&ms, st.e, e.e) })
	return float64(ms), err
}

func (e *cudaEvent) destroy() error {
	return e.b.call("cuEventDestroy", func() cuResult { return e.b.api.cuEventDestroy(e.e) })
}

func (b *cudaBackend) stream(s stream) (uintptr, error) {
	cs, ok := s.(*cudaStream)
	if !ok {
		return 0, fmt.Errorf("cuda: %T is not a CUDA stream", s)
	}
	return cs.s, nil
}

func (b *cudaBackend) copyAsync(s stream, dst, src uintptr, n int) error {
	h, err := b.stream(s)
	if err != nil {
		return err
	}
	return b.call("cuMemcpyDtoDAsync", func() cuResult { return b.api.cuMemcpyDtoDAsync(uint64(dst), uint64(src), uint64(n), h) })
}

// uploadAsync: from pageable memory the driver stages the bytes before it
// returns, but the copy to the device is ordered on s only.
func (b *cudaBackend) uploadAsync(s stream, dst uintptr, src []byte) error {
	h, err := b.stream(s)
	if err != nil || len(src) == 0 {
		return err
	}
	defer runtime.KeepAlive(src)
	return b.call("cuMemcpyHtoDAsync", func() cuResult {
		return b.api.cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), h)
	})
}

func (b *cudaBackend) downloadAsync(s stream, dst []byte, src uintptr) error {
	h, err := b.stream(s)
	if err != nil || len(dst) == 0 {
		return err
	}
	defer runtime.KeepAlive(dst)
	return b.call("cuMemcpyDtoHAsync", func() cuResult {
		return b.api.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst)), h)
	})
}

// kernelArgs is a launch's parameter block: every kernel parameter is 8
// bytes (pointers and u64, kernels/reduce.cu), and cuLaunchKernel takes
// an array of pointers to them. Heap-allocated, so that no pointer the
// driver reads moves.
type kernelArgs struct {
	vals [5]uint64
	ptrs [5]unsafe.Pointer
}

func (b *cudaBackend) launch(s stream, kernel string, blocks int, vals ...uint64) error {
	h, err := b.stream(s)
	if err != nil {
		return err
	}
	fn, ok := b.fns[kernel]
	if !ok {
		return fmt.Errorf("cuda: kernel %s not loaded", kernel)
	}
	a := new(kernelArgs)
	for i, v := range vals {
		a.vals[i] = v
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	const threads = 256
	err = b.call("cuLaunchKernel("+kernel+")", func() cuResult {
		return b.api.cuLaunchKernel(fn, uint32(blocks), 1, 1, threads, 1, 1, 0, h, unsafe.Pointer(&a.ptrs[0]), nil)
	})
	runtime.KeepAlive(a)
	return err
}

// launchReduce: 256 threads a block, about 4 elements a thread, at most
// 32 blocks per SM (the kernels loop over the rest).
func (b *cudaBackend) launchReduce(s stream, kernel string, out, a, x uintptr, n, nranks int) error {
	const perBlock = 256 * 4
	blocks := max(1, min((n+perBlock-1)/perBlock, 32*b.sms))
	return b.launch(s, kernel, blocks, uint64(out), uint64(a), uint64(x), uint64(n), uint64(nranks))
}

func (b *cudaBackend) launchNop(s stream) error { return b.launch(s, nopKernel, 1, 0) }
