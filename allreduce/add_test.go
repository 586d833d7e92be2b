package allreduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// addPath is one implementation of the Sum kernel under test.
type addPath[T arith] struct {
	name string
	vec  bool // needs the vector kernels
	fn   func(out, a, b []T)
}

func addPaths[T arith]() []addPath[T] {
	return []addPath[T]{
		{"go", false, addElemsGo[T]},
		{"vec", true, addElemsVec[T]},
		{"dispatch", false, func(out, a, b []T) {
			if !addVec(out, a, b) {
				addElemsGo(out, a, b)
			}
		}},
		{"combine", false, func(out, a, b []T) { combineElems(Sum, out, a, b) }},
	}
}

// addRef is the test's own scalar reference: one Go add per element.
func addRef[T arith](a, b []T) []T {
	r := make([]T, len(a))
	for i := range r {
		r[i] = a[i] + b[i]
	}
	return r
}

// elemBits is the raw bit pattern of x, so NaN payloads and -0 compare exactly.
func elemBits[T arith](x T) uint64 {
	if unsafe.Sizeof(x) == 4 {
		return uint64(*(*uint32)(unsafe.Pointer(&x)))
	}
	return *(*uint64)(unsafe.Pointer(&x))
}

// addSpecials are values the kernels must handle like the scalar loop.
func addSpecials[T arith]() []T {
	var z T
	switch {
	case isFloat[T]() && unsafe.Sizeof(z) == 4:
		f := func(b uint32) T { v := math.Float32frombits(b); return *(*T)(unsafe.Pointer(&v)) }
		return []T{
			f(0x7fc00000), f(0xffc00001), f(0x7f800001), // quiet NaNs, signalling NaN
			f(0x7f800000), f(0xff800000), // ±Inf
			f(0x00000000), f(0x80000000), // ±0
			f(0x00000001), f(0x807fffff), f(0x00400000), // denormals
			f(0x7f7fffff), f(0xff7fffff), f(0x00800000), // ±MaxFloat32, smallest normal
			f(math.Float32bits(0.1)), f(math.Float32bits(-1)), 1, 3,
		}
	case isFloat[T]():
		f := func(b uint64) T { v := math.Float64frombits(b); return *(*T)(unsafe.Pointer(&v)) }
		return []T{
			f(0x7ff8000000000000), f(0xfff8000000000001), f(0x7ff0000000000001),
			f(0x7ff0000000000000), f(0xfff0000000000000),
			f(0), f(0x8000000000000000),
			f(1), f(0x800fffffffffffff), f(0x0008000000000000),
			f(0x7fefffffffffffff), f(0xffefffffffffffff), f(0x0010000000000000),
			f(math.Float64bits(0.1)), f(math.Float64bits(-1)), 1, 3,
		}
	case unsafe.Sizeof(z) == 4:
		return []T{T(math.MaxInt32), T(math.MinInt32), -1, 0, 1, T(math.MaxInt32 - 1)}
	default:
		hi, lo := int64(math.MaxInt64), int64(math.MinInt64)
		return []T{T(hi), T(lo), -1, 0, 1, T(hi - 1)}
	}
}

// addFill fills s with a mix of special values and random ones.
func addFill[T arith](rng *rand.Rand, s []T) {
	sp := addSpecials[T]()
	var z T
	for i := range s {
		if rng.IntN(3) == 0 {
			s[i] = sp[rng.IntN(len(sp))]
			continue
		}
		u := rng.Uint64()
		if unsafe.Sizeof(z) == 4 {
			v := uint32(u)
			if isFloat[T]() {
				v &^= 0x40000000 // keep the exponent away from Inf/NaN mostly
			}
			s[i] = *(*T)(unsafe.Pointer(&v))
		} else {
			if isFloat[T]() {
				u &^= 0x4000000000000000
			}
			s[i] = *(*T)(unsafe.Pointer(&u))
		}
	}
}

const addGuard = 8 // elements checked just past out

func testAddType[T arith](t *testing.T) {
	var z T
	sentinel := T(0x5a)
	lengths := make([]int, 0, 140)
	for n := 0; n <= 130; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 255, 1000, 1<<16+3)
	for _, p := range addPaths[T]() {
		if p.vec && !haveVecAdd {
			t.Logf("%s: no vector kernels on this machine, skipped", p.name)
			continue
		}
		rng := rand.New(rand.NewPCG(1, uint64(unsafe.Sizeof(z))))
		for _, n := range lengths {
			for off := 0; off < 4; off++ {
				for _, alias := range []string{"out=a", "out=b", "distinct"} {
					ba := make([]T, n+8)
					bb := make([]T, n+8)
					bo := make([]T, off+n+addGuard)
					a := ba[(off+1)%4:][:n]
					b := bb[(off+3)%4:][:n]
					out := bo[off:][:n]
					addFill(rng, a)
					addFill(rng, b)
					for i := range bo {
						bo[i] = sentinel
					}
					switch alias {
					case "out=a":
						copy(out, a)
						a = out
					case "out=b":
						copy(out, b)
						b = out
					}
					want := addRef(a, b)
					p.fn(out, a, b)
					for i := range out {
						if elemBits(out[i]) != elemBits(want[i]) {
							t.Fatalf("%s n=%d off=%d %s: out[%d] = %v (%#x), want %v (%#x)",
								p.name, n, off, alias, i, out[i], elemBits(out[i]), want[i], elemBits(want[i]))
						}
					}
					for i, v := range bo[off+n:] {
						if elemBits(v) != elemBits(sentinel) {
							t.Fatalf("%s n=%d off=%d %s: guard element %d past out overwritten: %v", p.name, n, off, alias, i, v)
						}
					}
					for i, v := range bo[:off] {
						if elemBits(v) != elemBits(sentinel) {
							t.Fatalf("%s n=%d off=%d %s: element %d before out overwritten: %v", p.name, n, off, alias, i, v)
						}
					}
				}
			}
		}
	}
}

func TestAddFloat32(t *testing.T) { testAddType[float32](t) }
func TestAddFloat64(t *testing.T) { testAddType[float64](t) }
func TestAddInt32(t *testing.T)   { testAddType[int32](t) }
func TestAddInt64(t *testing.T)   { testAddType[int64](t) }

type addNamedF32 float32
type addNamedI64 int64

// Named element types dispatch by size and kind, not by a type switch.
func TestAddNamedTypes(t *testing.T) {
	testAddType[addNamedF32](t)
	testAddType[addNamedI64](t)
}

// The integer kernels wrap on overflow, as Go does.
func TestAddIntWrap(t *testing.T) {
	n := 37
	a32, b32, o32 := make([]int32, n), make([]int32, n), make([]int32, n)
	a64, b64, o64 := make([]int64, n), make([]int64, n), make([]int64, n)
	for i := range n {
		a32[i], b32[i] = math.MaxInt32, int32(i+1)
		a64[i], b64[i] = math.MinInt64, -int64(i+1)
	}
	for _, p := range []struct {
		name string
		vec  bool
		f32  func(out, a, b []int32)
		f64  func(out, a, b []int64)
	}{
		{"go", false, addElemsGo[int32], addElemsGo[int64]},
		{"vec", true, addElemsVec[int32], addElemsVec[int64]},
	} {
		if p.vec && !haveVecAdd {
			continue
		}
		p.f32(o32, a32, b32)
		p.f64(o64, a64, b64)
		for i := range n {
			if w := math.MinInt32 + int32(i); o32[i] != w {
				t.Fatalf("%s int32[%d] = %d, want %d", p.name, i, o32[i], w)
			}
			if w := math.MaxInt64 - int64(i); o64[i] != w {
				t.Fatalf("%s int64[%d] = %d, want %d", p.name, i, o64[i], w)
			}
		}
	}
}

// A short a or b panics on every path, as the scalar loop does.
func TestAddShortInputPanics(t *testing.T) {
	for _, p := range addPaths[float32]() {
		if p.vec && !haveVecAdd {
			continue
		}
		for _, n := range []int{3, 64} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s n=%d: no panic for a short input", p.name, n)
					}
				}()
				p.fn(make([]float32, n), make([]float32, n-1), make([]float32, n))
			}()
		}
	}
}

func TestAddNoAllocs(t *testing.T) {
	for _, n := range []int{2, 1024} {
		f32 := make([]float32, n)
		i64 := make([]int64, n)
		if got := testing.AllocsPerRun(100, func() {
			combineElems(Sum, i64, i64, i64)
			combineElems(Sum, f32, f32, f32)
			combineBytes(Int64, Avg, asBytes(i64), asBytes(i64), asBytes(i64))
		}); got != 0 {
			t.Errorf("n=%d: %v allocations per run, want 0", n, got)
		}
	}
}

// BenchmarkAdd compares the AVX2 kernel with the pure-Go loop on float32,
// in place (out == a) as the all-reduce calls it.
func BenchmarkAdd(b *testing.B) {
	for _, size := range []int{256 << 10, 16 << 20} {
		n := size / 4
		out, in := make([]float32, n), make([]float32, n)
		for i := range out {
			out[i], in[i] = float32(i), float32(i%7)
		}
		for _, p := range []struct {
			name string
			vec  bool
			fn   func(out, a, b []float32)
		}{
			{"go", false, addElemsGo[float32]},
			{"avx2", true, addElemsVec[float32]},
			{"dispatch", false, func(out, a, b []float32) { combineElems(Sum, out, a, b) }},
		} {
			b.Run(fmt.Sprintf("%s/%s", byteSize(size), p.name), func(b *testing.B) {
				if p.vec && !haveVecAdd {
					b.Skip("no AVX2")
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					p.fn(out, out, in)
				}
			})
		}
	}
}

// BenchmarkAddTiny is the 8-byte all-reduce's reduce step: a 2-element Sum
// through combineElems, which must stay a plain inlined Go loop.
func BenchmarkAddTiny(b *testing.B) {
	out, in := []float32{1, 2}, []float32{3, 4}
	b.SetBytes(8)
	for b.Loop() {
		combineElems(Sum, out, out, in)
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
