// Package cuda runs ringddp's collectives on gorgonia tensors and buffers
// in CUDA device memory: the ring AllReduce (reduce-scatter then
// all-gather) and the ReduceScatter and AllGather that ZeRO-1 needs, on
// ranks that each own a stream, with reduction kernels (Sum, Avg, Max,
// Min, Prod for float32, float64, int32 and int64) written in CUDA C
// (kernels/reduce.cu), compiled to PTX by `go generate`, committed and
// embedded, and loaded with the driver's module API.
//
// The collectives (World, Comm: comm.go, ring.go, plan.go) are untagged
// code against a small device interface (backend.go) with two
// implementations: the CUDA driver, loaded at run time from libcuda.so.1
// without cgo (cudadrv.go, cudadev.go, cudastream.go; the `ringddp_cuda`
// build tag, so the default build never contains it), and the host device
// (hostdev.go, hoststream.go, hostmem.go), which runs the same protocol on
// host memory with a goroutine per stream, real asynchrony and fault
// injection, so that the ring, its event ordering and its error paths are
// tested in every build, under the race detector. The kernels' source is
// also compiled as host C++ and tested against the host ring
// (kernels/host). docs/cuda.md has the design, the build, how to run the
// GPU check and the plan for what is not built yet.
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
// All ranks of a World are goroutines of one process on one device, in
// one context (on CUDA the device's primary context), each with its own
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
