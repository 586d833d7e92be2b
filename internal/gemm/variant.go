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
// kernels (the gonum variant) leave every product to gonum.
type kernels struct {
	f32 blocking[float32]
	f64 blocking[float64]
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
