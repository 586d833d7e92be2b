package vecops

import (
	"os"
	"unsafe"

	"github.com/ringddp/ringddp/internal/cpuvariant"

	"github.com/ringddp/ringddp/numeric"
)

// Float is the element types the kernels serve.
type Float = numeric.Float

// sgdKernel runs one case of SGD's step on the first n - n%lanes elements
// (wd: weight decay, mom: momentum, omd: one minus dampening). buf is
// unused by the Plain cases. The constants come by value: a pointer passed
// through a function value would escape, and allocate at every step.
type sgdKernel[T Float] func(p, g, buf *T, n int, negLR, wd, mom, omd T)

// adamKernel runs one case of Adam's step on the first n - n%lanes
// elements, with Adam's fields as constants.
type adamKernel[T Float] func(p, g, m, v *T, n int, negStep, bc2Sqrt, eps, b1, omb1, b2, omb2, decayMul, l2 T)

// lutKernel sets dst[i] = table[src[i]] for the first n - n%lanes elements.
type lutKernel[T Float] func(dst *T, src *byte, n int, table *[256]T)

// kernels is one element type's kernels in one variant. A nil kernel (all
// of them in the pure-Go variant) leaves every element to the scalar code.
type kernels[T Float] struct {
	lanes int // elements per vector: the kernels leave n%lanes to the scalar code
	// sgd is indexed by case (sgdPlain, sgdFirst, sgdMomentum), weight
	// decay and Nesterov; the Plain cases have no Nesterov entry.
	sgd  [3][2][2]sgdKernel[T]
	adam [3]adamKernel[T] // indexed by AdamDecay
	lut  lutKernel[T]
	// copyBlock, addBlock, relu and reluGrad: AVX-512 only (masked
	// moves); the other variants run the scalar loops.
	copyBlock, addBlock blockKernel[T]
	relu                reluKernel[T]
	reluGrad            reluGradKernel[T]
	col2im              col2imKernel[T]
	maxPool             poolKernel[T]
	maxPoolGrad         poolKernel[T]
}

// typed is one variant's kernels for both element types. Nil kernels (all
// of them in the pure-Go variant) leave every element to the scalar code.
type typed struct {
	f32 kernels[float32]
	f64 kernels[float64]
}

// Variant is one instruction set's kernels (see cpuvariant); the variant
// named "go" is the scalar loops.
type Variant = cpuvariant.Variant[typed]

// VariantEnv is the environment variable that forces a variant by name
// (for tests and benchmarks): "avx512", "avx2" or "go".
const VariantEnv = "RINGDDP_VECOPS"

// goVariant is the fallback every machine has: the scalar loops.
func goVariant() Variant { return Variant{Name: "go", Needs: "nothing", Runs: true} }

// kernelsOf returns v's kernels for T. A type whose underlying type is
// float32 (float64) shares float32's (float64's) kernels: the layouts of
// kernels[float32] and kernels[T] are the same, and so are the calling
// conventions of their functions.
func kernelsOf[T Float](v *Variant) *kernels[T] {
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		return (*kernels[T])(unsafe.Pointer(&v.K.f32))
	}
	return (*kernels[T])(unsafe.Pointer(&v.K.f64))
}

// Variants lists the variants this CPU can run, fastest first; the pure-Go
// one is always last.
func Variants() []Variant {
	all := allVariants()
	return cpuvariant.Runnable(all[:])
}

// Best returns the fastest variant this CPU runs, or the one that the
// environment variable VariantEnv names. A name the CPU cannot run, or one
// that does not exist, is an error that says which ones it can. Callers
// may call it at every step: it allocates nothing unless it fails.
func Best() (Variant, error) {
	all := allVariants()
	return cpuvariant.Choose("vecops", VariantEnv, os.Getenv, all[:])
}

// Lookup returns the variant called name if this CPU runs it.
func Lookup(name string) (Variant, error) {
	all := allVariants()
	return cpuvariant.Choose("vecops", VariantEnv, func(string) string { return name }, all[:])
}
