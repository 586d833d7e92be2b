package vecops

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

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
}

// Variant is one instruction set's kernels. The zero Variant's kernels are
// all nil: it is the pure-Go one, whatever its Name.
type Variant struct {
	Name string
	f32  kernels[float32]
	f64  kernels[float64]
	// needs names the CPU features the variant requires, for messages.
	needs string
}

// goVariant is the fallback every machine has: the scalar loops.
var goVariant = Variant{Name: "go", needs: "nothing"}

// VariantEnv is the environment variable that forces a variant by name
// (for tests and benchmarks): "avx512", "avx2" or "go".
const VariantEnv = "RINGDDP_VECOPS"

// kernelsOf returns v's kernels for T. A type whose underlying type is
// float32 (float64) shares float32's (float64's) kernels: the layouts of
// kernels[float32] and kernels[T] are the same, and so are the calling
// conventions of their functions.
func kernelsOf[T Float](v *Variant) *kernels[T] {
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		return (*kernels[T])(unsafe.Pointer(&v.f32))
	}
	return (*kernels[T])(unsafe.Pointer(&v.f64))
}

// Variants lists the variants this CPU can run, fastest first; the pure-Go
// one is always last.
func Variants() []Variant { return append(assemblyVariants(), goVariant) }

// AllVariantNames lists every variant of this build's architecture, run
// here or not, so that tests can say which ones they skipped.
func AllVariantNames() []string {
	names := []string{}
	for _, v := range allAssemblyVariants() {
		names = append(names, v.Name)
	}
	return append(names, goVariant.Name)
}

// Best returns the fastest variant this CPU runs, or the one that the
// environment variable VariantEnv names. A name the CPU cannot run, or one
// that does not exist, is an error that says which ones it can. Callers
// may call it at every step: it allocates nothing unless it fails.
func Best() (Variant, error) {
	name := strings.TrimSpace(os.Getenv(VariantEnv))
	if name == "" {
		return fastest(), nil
	}
	return Lookup(name)
}

// Lookup returns the variant called name if this CPU runs it.
func Lookup(name string) (Variant, error) {
	if name == goVariant.Name {
		return goVariant, nil
	}
	if v, ok := runnable(name); ok {
		return v, nil
	}
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
			return Variant{}, fmt.Errorf("vecops: %s=%s: this CPU lacks %s (it runs %s)", VariantEnv, name, v.needs, strings.Join(names, ", "))
		}
	}
	return Variant{}, fmt.Errorf("vecops: %s=%q is not a variant (this CPU runs %s)", VariantEnv, name, strings.Join(names, ", "))
}
