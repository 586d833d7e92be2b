package gemm

import (
	"fmt"
	"os"
	"strings"
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

// Variant is one instruction set's micro-kernels. The zero Variant (Name
// "gonum") computes with gonum's pure-Go BLAS.
type Variant struct {
	Name string
	f32  blocking[float32]
	f64  blocking[float64]
	// needs names the CPU features the variant requires, for messages;
	// runs says whether this CPU has them.
	needs string
	runs  bool
}

// gonumVariant is the fallback every machine has.
func gonumVariant() Variant { return Variant{Name: "gonum", needs: "nothing", runs: true} }

// assemblyVariants lists the assembly variants this CPU runs, fastest first.
func assemblyVariants() []Variant {
	var vs []Variant
	for _, v := range allAssemblyVariants() {
		if v.runs {
			vs = append(vs, v)
		}
	}
	return vs
}

// VariantEnv is the environment variable that forces a variant by name
// (for tests and benchmarks): "avx512", "avx2" or "gonum".
const VariantEnv = "RINGDDP_GEMM"

// Variants lists the variants this CPU can run, fastest first; gonum's is
// always last.
func Variants() []Variant { return append(assemblyVariants(), gonumVariant()) }

// Best returns the fastest variant this CPU runs, or the one that the
// environment variable VariantEnv names. A name the CPU cannot run, or
// one that does not exist, is an error that says which ones it can.
func Best() (Variant, error) {
	vs := Variants()
	name := strings.TrimSpace(os.Getenv(VariantEnv))
	if name == "" {
		return vs[0], nil
	}
	return Lookup(name)
}

// Lookup returns the variant called name if this CPU runs it.
func Lookup(name string) (Variant, error) {
	vs := Variants()
	names := make([]string, len(vs))
	for i, v := range vs {
		if v.Name == name {
			return v, nil
		}
		names[i] = v.Name
	}
	for _, v := range allAssemblyVariants() {
		if v.Name == name {
			return Variant{}, fmt.Errorf("gemm: %s=%s: this CPU lacks %s (it runs %s)", VariantEnv, name, v.needs, strings.Join(names, ", "))
		}
	}
	return Variant{}, fmt.Errorf("gemm: %s=%q is not a variant (this CPU runs %s)", VariantEnv, name, strings.Join(names, ", "))
}
