package gemm

import (
	"os"

	"github.com/ringddp/ringddp/internal/cpuvariant"
)

// scalar is the element types the kernels serve.
type scalar interface{ float32 | float64 }

// microKernel multiplies an MR×kc block of A (element (i, p) at byte
// offset i·rsa + p·csa from a) by a kc×NR block of B (row p at byte offset
// p·rsb from b, its NR elements contiguous) and adds the product to the
// MR×NR block of row-major C at c, whose rows are ldc elements apart, or
// stores it there when accumulate is 0 (see the generator in _asm for the
// exact contract).
type microKernel[T scalar] func(kc int, a *T, rsa, csa int, b *T, rsb int, c *T, ldc int, accumulate int)

// blocking is one element type's micro-kernel and the cache blocks
// around it: kc steps of k per packed panel, mc rows of A per packed block
// (a multiple of mr), nc columns of B per packed panel (a multiple of nr).
type blocking[T scalar] struct {
	kernel     microKernel[T]
	mr, nr     int
	kc, mc, nc int
}

// kernels is one instruction set's blocking for both element types; nil
// kernels (the gonum variant) leave every product to gonum. few32 and
// few64 are a second, shorter micro-kernel (fewer rows, MR·NR/lanes
// accumulators where the main one has nearly twice as many) for products
// of few rows, such as a convolution's 8 or 16 output channels, which
// the main kernel would compute mostly as zero padding (see pick).
type kernels struct {
	f32   blocking[float32]
	f64   blocking[float64]
	few32 blocking[float32]
	few64 blocking[float64]
}

// fewRows is the most rows of C for which the few-row kernel may serve:
// past it, the main kernel's padding is a small share of the work and
// its better ratio of multiply-adds to loads wins.
const fewRows = 24

// pick returns the blocking for a product of m rows: the few-row one when
// the variant has it, m ≤ fewRows and it pads m to fewer rows than the
// main one does (m = 8: 8 rows instead of 14; m = 16: 16 instead of 28).
func pick[T scalar](main, few *blocking[T], m int) *blocking[T] {
	if few.kernel != nil && m <= fewRows && ceilDiv(m, few.mr)*few.mr < ceilDiv(m, main.mr)*main.mr {
		return few
	}
	return main
}

// Variant is one instruction set's kernels (see cpuvariant). The variant
// named "gonum" computes with gonum's pure-Go BLAS.
type Variant = cpuvariant.Variant[kernels]

// VariantEnv is the environment variable that forces a variant by name
// (for tests and benchmarks): "avx512", "avx2" or "gonum".
const VariantEnv = "RINGDDP_GEMM"

// allVariants lists this architecture's variants, fastest first, gonum's last.
func allVariants() []Variant {
	return append(assemblyVariants(), Variant{Name: "gonum", Needs: "nothing", Runs: true})
}

// Variants lists the variants this CPU runs, fastest first; gonum's is
// always last.
func Variants() []Variant { return cpuvariant.Runnable(allVariants()) }

// Best returns the fastest variant this CPU runs, or the one that the
// environment variable VariantEnv names. A name the CPU cannot run, or
// one that does not exist, is an error that says which ones it can.
func Best() (Variant, error) { return cpuvariant.Choose("gemm", VariantEnv, os.Getenv, allVariants()) }

// Lookup returns the variant called name if this CPU runs it.
func Lookup(name string) (Variant, error) {
	return cpuvariant.Choose("gemm", VariantEnv, func(string) string { return name }, allVariants())
}
