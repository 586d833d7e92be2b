package cuda

import (
	_ "embed"
	"fmt"
	"regexp"
	"sort"

	"github.com/ringddp/ringddp/allreduce"
)

// The reduction kernels, CUDA C in kernels/reduce.cu, compiled to PTX by
// `go generate` (nvcc 11.8 from Debian's nvidia-cuda-toolkit, see
// scripts/cuda-env.sh) and committed, so that building needs no nvcc. PTX
// for compute_70 runs on every GPU from Volta on: the driver JIT-compiles
// it for the GPU at hand when the module is loaded.
//
//go:generate nvcc -ptx -arch=compute_70 -o kernels/reduce.ptx kernels/reduce.cu

//go:embed kernels/reduce.ptx
var reducePTX string

// nopKernel does nothing: scripts/gpu-check.sh times it as the bare cost of
// a kernel launch.
const nopKernel = "ringddp_nop"

var opNames = map[allreduce.ReduceOp]string{
	allreduce.Sum:  "sum",
	allreduce.Avg:  "avg",
	allreduce.Max:  "max",
	allreduce.Min:  "min",
	allreduce.Prod: "prod",
}

var dtNames = map[allreduce.DType]string{
	allreduce.Float32: "f32",
	allreduce.Float64: "f64",
	allreduce.Int32:   "i32",
	allreduce.Int64:   "i64",
}

// Ops and DTypes are what the device collectives support: every reduction
// operator for every element type, Avg for floating point only (as on the
// host).
var (
	Ops    = []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max, allreduce.Min, allreduce.Prod}
	DTypes = []allreduce.DType{allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64}
)

// kernelName is the PTX entry point that computes out = a op b for
// elements of type dt, a being the first operand. For Avg it is the
// kernel of the ring's last reduce step, (a + b) / nranks; the steps
// before it use Sum's kernel (stepKernel).
func kernelName(op allreduce.ReduceOp, dt allreduce.DType) (string, error) {
	o, ok1 := opNames[op]
	d, ok2 := dtNames[dt]
	if !ok1 || !ok2 || (op == allreduce.Avg && !dt.IsFloat()) {
		return "", fmt.Errorf("%w: no device kernel for %v of %v", allreduce.ErrInvalid, op, dt)
	}
	return "ringddp_" + o + "_" + d, nil
}

// stepKernel is the kernel of one reduce step of a collective with op:
// Avg's steps sum, and only the last divides.
func stepKernel(op allreduce.ReduceOp, dt allreduce.DType, last bool) (string, error) {
	if op == allreduce.Avg && !last {
		if !dt.IsFloat() {
			return kernelName(op, dt) // the error
		}
		op = allreduce.Sum
	}
	return kernelName(op, dt)
}

// kernelNames is every entry point the code loads from the PTX, sorted.
func kernelNames() []string {
	var out []string
	for _, dt := range DTypes {
		for _, op := range Ops {
			if name, err := kernelName(op, dt); err == nil {
				out = append(out, name)
			}
		}
	}
	out = append(out, nopKernel)
	sort.Strings(out)
	return out
}

var entryRE = regexp.MustCompile(`(?m)^\s*\.visible\s+\.entry\s+([A-Za-z_][A-Za-z0-9_$]*)\s*\(`)

// ptxEntries lists the entry points (.visible .entry) of a PTX module.
func ptxEntries(ptx string) []string {
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}
