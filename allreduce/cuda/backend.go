package cuda

import "errors"

// The device seam. World, Comm, Device and Buffer (all untagged) drive a
// GPU through the small interface below; two implementations exist:
//
//   - the CUDA driver (cudadrv.go, cudadev.go; `ringddp_cuda` build tag),
//     which loads libcuda.so.1 at run time (no cgo) and runs the PTX
//     kernels of kernels/reduce.cu;
//   - the host device (hostdev.go, every build), which runs the same
//     protocol on host memory with a goroutine per stream, so that the
//     event ordering, the ring schedule, the error paths and the collective
//     matrix run in every CI under the race detector.
//
// Vocabulary, as in CUDA: a stream is a queue of operations run in order,
// later than they are enqueued; an event recorded on a stream completes
// when the stream reaches it; a stream waiting for an event runs nothing
// enqueued after the wait until the event has completed. Device memory is
// named by addresses (uintptr) that only the device's operations read; it
// belongs to the context it was allocated in.

// backend is one GPU (one context) as this package uses it. Its methods
// may be called from any goroutine.
type backend interface {
	name() string
	multiprocessors() int
	// contextID identifies the context this backend's allocations, streams
	// and kernels belong to (a CUcontext on CUDA).
	contextID() uintptr

	alloc(bytes int) (uintptr, error)
	free(p uintptr) error
	// pointerInfo says what p is: device memory of which context, or
	// managed memory, or an error for memory the device does not know.
	pointerInfo(p uintptr) (memInfo, error)

	newStream() (stream, error)
	// newEvent makes an event; timing ones can measure elapsedSince.
	newEvent(timing bool) (event, error)

	// launchReduce enqueues the reduce kernel named kernel (kernelName):
	// out[i] = a[i] op b[i] for i < n elements, nranks for Avg's division.
	launchReduce(s stream, kernel string, out, a, b uintptr, n, nranks int) error
	// launchNop enqueues the empty kernel (the bare cost of a launch).
	launchNop(s stream) error
	// copyAsync enqueues a device-to-device copy of n bytes.
	copyAsync(s stream, dst, src uintptr, n int) error
	// uploadAsync enqueues a host-to-device copy of src; downloadAsync the
	// reverse. The host slice must stay untouched until the stream has
	// passed the copy.
	uploadAsync(s stream, dst uintptr, src []byte) error
	downloadAsync(s stream, dst []byte, src uintptr) error

	// close releases the context (unloads the kernels).
	close() error
}

// stream is a queue of device operations.
type stream interface {
	// wait makes operations enqueued after it wait for e's completion.
	wait(e event) error
	// query reports whether everything enqueued so far has completed;
	// errNotReady when not, another error when the stream has failed.
	query() error
	handle() uintptr
	// destroy releases the stream (its queued work still completes).
	destroy() error
}

// event marks a point of a stream.
type event interface {
	// record places the event at the current end of s.
	record(s stream) error
	// query: nil once the point is reached, errNotReady before.
	query() error
	// elapsed is the device time from start (recorded with timing) to this
	// event, both complete.
	elapsedSince(start event) (float64, error)
	destroy() error
}

// errNotReady is what query returns while work is outstanding (CUDA's
// CUDA_ERROR_NOT_READY).
var errNotReady = errors.New("cuda: not ready")

// memInfo is what pointerInfo knows of an address.
type memInfo struct {
	context uintptr // the context the memory was allocated in (0 for managed memory)
	managed bool    // cuMemAllocManaged: usable from every context of the process
	device  int     // the device ordinal
}
