package half16

import (
	"os"
	"unsafe"

	"github.com/ringddp/ringddp/internal/cpuvariant"
)

// Format is a 16-bit floating-point format.
type Format uint8

// The formats.
const (
	Float16  Format = iota // IEEE binary16
	BFloat16               // the top half of an IEEE binary32
)

// Op is the float32 operation of a combine step.
type Op uint8

// The operations: a + b, a · b, and Max and Min as package allreduce
// defines them (b when b > a, resp. b < a, else a; NaN if either is).
const (
	Add Op = iota
	Mul
	Max
	Min
	numOps
)

// kernels is one variant's kernels, indexed by Format (and Op). Nil
// kernels (all of them in the go variant) leave every element to the
// caller.
type kernels struct {
	lanes   int
	decode  [2]func(dst *float32, src *uint16, n int)
	encode  [2]func(dst *uint16, src *float32, n int)
	combine [2][numOps]func(out, a, b *uint16, n int)
	divide  [2]func(s *uint16, n int, d float32)
}

// Variant is one instruction set's kernels (see cpuvariant).
type Variant = cpuvariant.Variant[kernels]

// VariantEnv is the environment variable that forces a variant by name
// (for tests and benchmarks): "avx512", "avx2" or "go".
const VariantEnv = "RINGDDP_HALF16"

// goVariant is the fallback every machine has: no kernels.
func goVariant() Variant { return Variant{Name: "go", Needs: "nothing", Runs: true} }

// Variants lists the variants this CPU can run, fastest first; the go one
// is always last.
func Variants() []Variant {
	all := allVariants()
	return cpuvariant.Runnable(all[:])
}

// AllVariants lists every variant of this architecture, whether this CPU
// runs it or not, the go one last (for tests: cpuvariant.Split).
func AllVariants() []Variant {
	all := allVariants()
	return all[:]
}

// Best returns the fastest variant this CPU runs, or the one that the
// environment variable VariantEnv names. A name the CPU cannot run, or one
// that does not exist, is an error that says which ones it can. It
// allocates nothing unless it fails.
func Best() (Variant, error) {
	all := allVariants()
	return cpuvariant.Choose("half16", VariantEnv, os.Getenv, all[:])
}

// Default is Best, or the go variant where Best fails. Every variant
// gives the same bits, so a misnamed variant changes only the speed; the
// callers that cannot return an error (numeric's converters, allreduce's
// combine step) use it.
func Default() Variant {
	v, err := Best()
	if err != nil {
		return goVariant()
	}
	return v
}

// Lookup returns the variant called name if this CPU runs it.
func Lookup(name string) (Variant, error) {
	all := allVariants()
	return cpuvariant.Choose("half16", VariantEnv, func(string) string { return name }, all[:])
}

// whole is how many leading elements of n the kernels of k handle: n
// rounded down to whole vectors, 0 without kernels.
func whole(k *kernels, n int) int {
	if k.lanes == 0 {
		return 0
	}
	return n - n%k.lanes
}

// Decode widens src into dst (dst[i] = src[i] as float32, exactly; a NaN
// quiet) for the first len(dst) elements (src at least as long), and
// returns how many leading elements it did; the caller widens the rest.
func Decode(v *Variant, f Format, dst []float32, src []uint16) int {
	k := &v.K
	n := whole(k, min(len(dst), len(src)))
	if n > 0 {
		k.decode[f](unsafe.SliceData(dst), unsafe.SliceData(src), n)
	}
	return n
}

// Encode rounds src into dst (to nearest, ties to even; a NaN keeps its
// sign and top payload bits and is quiet), and returns how many leading
// elements it did; the caller rounds the rest.
func Encode(v *Variant, f Format, dst []uint16, src []float32) int {
	k := &v.K
	n := whole(k, min(len(dst), len(src)))
	if n > 0 {
		k.encode[f](unsafe.SliceData(dst), unsafe.SliceData(src), n)
	}
	return n
}

// Combine sets out[i] to a[i] op b[i], computed in float32 and rounded
// once to f, a NaN result the canonical NaN, and returns how many leading
// elements it did; the caller combines the rest. out may alias a or b
// exactly (not partially).
func Combine(v *Variant, f Format, op Op, out, a, b []uint16) int {
	k := &v.K
	n := whole(k, min(len(out), len(a), len(b)))
	if n > 0 {
		k.combine[f][op](unsafe.SliceData(out), unsafe.SliceData(a), unsafe.SliceData(b), n)
	}
	return n
}

// Divide sets s[i] to s[i] / d, computed in float32 and rounded once to f,
// a NaN result the canonical NaN, and returns how many leading elements
// it did; the caller divides the rest.
func Divide(v *Variant, f Format, s []uint16, d float32) int {
	k := &v.K
	n := whole(k, len(s))
	if n > 0 {
		k.divide[f](unsafe.SliceData(s), n, d)
	}
	return n
}
