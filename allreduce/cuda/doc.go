// Package cuda runs ringddp's collectives on gorgonia tensors and buffers
// in CUDA device memory: the ring AllReduce (reduce-scatter then
// all-gather) and the ReduceScatter and AllGather that ZeRO-1 needs, on
// ranks that each own a stream, with reduction kernels (Sum, Avg, Max,
// Min, Prod for float32, float64, int32 and int64) written in CUDA C
// (kernels/reduce.cu), compiled to PTX by `go generate`, committed and
// embedded, and loaded with the driver's module API.
//
// Everything that touches the driver (gorgonia.org/cu, cgo, cuda.h,
// libcuda) is behind the `cuda` build tag: gorgonia.org/cu's init exits
// the process where there is no driver, so the default build and
// `go test ./...` never link it. Built without the tag this package holds
// only what needs no GPU and is tested everywhere: the kernel table and the
// embedded PTX (kernels.go), and the ring's schedule as data (plan.go),
// which the tests run on host memory against package allreduce's ring and
// check for races. docs/cuda.md has the design, the build and the plan for
// what is not built yet.
//
// # Why a device communicator and not a transport.Conn
//
// Package allreduce's algorithms move bytes through transport.Conn and
// reduce them in a transport.Sink, whose Consume gets a []byte the host
// reads: device memory cannot travel that way (a []byte over a device
// pointer faults on the first read), and a per-step synchronous Send/Recv
// would put a host round trip into every step of a collective that should
// run as one stream-ordered program on the GPU. So this package has its
// own communicator (World, Comm) whose ring mirrors allreduce/ring.go step
// for step — the same chunks (allreduce.ChunkBounds), the same operand
// order (out = local op received, ring.go's localFirst), Avg as the sum
// then one division on the chunk's last reduce — and is therefore bitwise
// identical to the host ring, special values included (kernels/reduce.cu
// reproduces the amd64 host's NaN rules).
//
// # The single-device ring
//
// All ranks of a World are goroutines of one process on one GPU, in one
// CUDA context (the device's primary context), each with its own
// non-blocking stream. Since every rank's buffers are addressable by every
// rank's kernels, a ring step does not copy a message into a staging
// buffer and then reduce it: the reduce kernel's second operand is the
// left neighbour's memory itself (NCCL's direct read). That is three
// memory passes per element and step where copy-then-reduce needs five.
// Each step is cut into up to 8 segments (16 MiB each by default); segment
// k of step g waits, with CUDA events, only for segment k of step g-1 on
// both neighbours, so a rank reduces segment k while its neighbours still
// work on segment k+1 of the previous step. Host goroutines only enqueue:
// a rank waits on the host until a neighbour has recorded the event it
// needs (so every device wait refers to work already submitted, and the
// GPU cannot deadlock), and the collective's completion is the stream's.
package cuda
