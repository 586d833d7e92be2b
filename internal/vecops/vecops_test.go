package vecops

import (
	"fmt"
	"github.com/ringddp/ringddp/internal/cpuvariant"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// variantsHere returns the assembly variants this CPU runs and logs the
// ones it skips.
func variantsHere(t testing.TB) []Variant {
	t.Helper()
	all := allVariants()
	here, skipped := cpuvariant.Split(all[:])
	if skipped != "" {
		t.Log(skipped)
	}
	if len(here) == 0 {
		t.Skip("no assembly variant runs on this CPU")
	}
	return here
}

// allNames lists every variant of this architecture, run here or not.
func allNames() []string {
	var names []string
	for _, v := range allVariants() {
		names = append(names, v.Name)
	}
	return names
}

// lengths cover 0, 1, every tail and several whole vectors of both widths.
var lengths = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 1000 + 3}

// offsets make views that start off any vector boundary.
var offsets = []int{0, 1, 3}

func bits[T Float](x T) uint64 {
	if unsafe.Sizeof(x) == 4 {
		return uint64(math.Float32bits(float32(x)))
	}
	return math.Float64bits(float64(x))
}

func fromBits[T Float](b uint64) T {
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		return T(math.Float32frombits(uint32(b)))
	}
	return T(math.Float64frombits(b))
}

// specials are the values that take other paths through the arithmetic:
// signed zeros, infinities, NaNs with payloads (quiet and signalling),
// denormals, the extremes of the normal range.
func specials[T Float]() []T {
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		bs := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7fc12345,
			0x7f800001, 0xff923456, 0x00000001, 0x807fffff, 0x00400000, 0x7f7fffff, 0xff7fffff, 0x00800000, 0x80800000}
		out := make([]T, len(bs))
		for i, b := range bs {
			out[i] = T(math.Float32frombits(b))
		}
		return out
	}
	bs := []uint64{0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0xfff8000000000001,
		0x7ff8123456789abc, 0x7ff0000000000001, 0xfff2345678901234, 1, 0x800fffffffffffff, 0x0008000000000000,
		0x7fefffffffffffff, 0xffefffffffffffff, 0x0010000000000000, 0x8010000000000000}
	out := make([]T, len(bs))
	for i, b := range bs {
		out[i] = fromBits[T](b)
	}
	return out
}

// fill returns n values: mostly ordinary numbers of mixed signs and
// magnitudes, one in four a special value.
func fill[T Float](rng *rand.Rand, n int) []T {
	sp := specials[T]()
	out := make([]T, n)
	for i := range out {
		switch rng.IntN(8) {
		case 0, 1:
			out[i] = sp[rng.IntN(len(sp))]
		case 2:
			out[i] = T(math.Ldexp(rng.Float64()-0.5, rng.IntN(200)-100))
		default:
			out[i] = T(rng.NormFloat64())
		}
	}
	return out
}

// view returns a copy of xs placed at offset off of a slice with guard
// values around it, and the whole slice.
func view[T Float](xs []T, off int) (v, whole []T) {
	whole = make([]T, off+len(xs)+5)
	for i := range whole {
		whole[i] = T(7.25)
	}
	copy(whole[off:], xs)
	return whole[off : off+len(xs)], whole
}

func sameBits[T Float](t *testing.T, what string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if raceBuild && got[i] != got[i] && want[i] != want[i] {
			continue // see raceBuild
		}
		if bits(got[i]) != bits(want[i]) {
			t.Fatalf("%s: [%d] = %v (%#x), want %v (%#x)", what, i, got[i], bits(got[i]), want[i], bits(want[i]))
		}
	}
}

// run applies step to views of copies of ins at offset off with variant v
// and returns the whole slices (guards included).
func run[T Float](v Variant, ins [][]T, off int, step func(v Variant, xs [][]T)) [][]T {
	views, wholes := make([][]T, len(ins)), make([][]T, len(ins))
	for i, in := range ins {
		views[i], wholes[i] = view(in, off)
	}
	step(v, views)
	return wholes
}

// checkAgainstGo runs step on random inputs of every length and offset with
// every variant here and with the scalar code, and compares every slice bit
// for bit, guards included.
func checkAgainstGo[T Float](t *testing.T, name string, slices int, step func(v Variant, xs [][]T)) {
	rng := rand.New(rand.NewPCG(uint64(slices), 29))
	for _, v := range variantsHere(t) {
		for _, n := range lengths {
			for _, off := range offsets {
				ins := make([][]T, slices)
				for i := range ins {
					ins[i] = fill[T](rng, n)
				}
				want := run(goVariant(), ins, off, step)
				got := run(v, ins, off, step)
				for i := range got {
					sameBits(t, fmt.Sprintf("%s %s n=%d off=%d slice %d", v.Name, name, n, off, i), got[i], want[i])
				}
			}
		}
	}
}

// sgdCases are every weight-decay and Nesterov case with usual constants,
// then each again with extreme ones (an infinite step, a denormal
// momentum, a huge weight decay), whose invalid operations make NaNs that
// meet the data's.
func sgdCases[T Float]() []SGD[T] {
	var out []SGD[T]
	for _, extreme := range []bool{false, true} {
		for _, decay := range []bool{false, true} {
			for _, nesterov := range []bool{false, true} {
				s := SGD[T]{NegLR: T(-0.01), WeightDecay: T(5e-4), Mom: T(0.9), OneMinusDamp: T(1 - 0.1), Decay: decay, Nesterov: nesterov}
				if extreme {
					s.NegLR, s.Mom, s.WeightDecay = T(math.Inf(-1)), fromBits[T](1), T(3e38)
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func testSGD[T Float](t *testing.T) {
	for _, s := range sgdCases[T]() {
		what := fmt.Sprintf("decay=%v nesterov=%v", s.Decay, s.Nesterov)
		checkAgainstGo(t, "Plain "+what, 2, func(v Variant, xs [][]T) { s.Plain(v, xs[0], xs[1]) })
		checkAgainstGo(t, "First "+what, 3, func(v Variant, xs [][]T) { s.First(v, xs[0], xs[1], xs[2]) })
		checkAgainstGo(t, "Momentum "+what, 3, func(v Variant, xs [][]T) { s.Momentum(v, xs[0], xs[1], xs[2]) })
	}
}

func TestSGDMatchesScalar(t *testing.T) {
	t.Run("float32", testSGD[float32])
	t.Run("float64", testSGD[float64])
}

func testAdam[T Float](t *testing.T) {
	const lr, b1, b2, wd = 1e-3, 0.9, 0.999, 0.01
	for _, d := range []AdamDecay{NoDecay, L2Decay, DecoupledDecay} {
		for _, step := range []float64{1, 7, 0} {
			a := Adam[T]{NegStep: T(-(lr / (1 - math.Pow(b1, step)))), Bc2Sqrt: T(math.Sqrt(1 - math.Pow(b2, step))), Eps: T(1e-8),
				B1: T(b1), OmB1: T(1 - b1), B2: T(b2), OmB2: T(1 - b2), DecayMul: T(1 - lr*wd), L2: T(wd), Decay: d}
			if step == 0 { // extreme constants: an infinite step, a zero bc2Sqrt, a huge L2
				a.L2, a.DecayMul = T(3e38), T(-3e38)
			}
			checkAgainstGo(t, fmt.Sprintf("Adam decay=%d t=%v", d, step), 4, func(v Variant, xs [][]T) { a.Step(v, xs[0], xs[1], xs[2], xs[3]) })
		}
	}
}

func TestAdamMatchesScalar(t *testing.T) {
	t.Run("float32", testAdam[float32])
	t.Run("float64", testAdam[float64])
}

func testLUT[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 29))
	table := new([256]T)
	copy(table[:], fill[T](rng, 256))
	for _, v := range variantsHere(t) {
		for _, n := range lengths {
			for _, off := range offsets {
				src := make([]byte, off+n+5)
				for i := range src {
					src[i] = byte(rng.IntN(256))
				}
				src = src[off : off+n]
				want := make([]T, n)
				for i, p := range src {
					want[i] = table[p]
				}
				dst, whole := view(make([]T, n), off)
				LUT(v, dst, src, table)
				sameBits(t, fmt.Sprintf("%s LUT n=%d off=%d", v.Name, n, off), dst, want)
				for i := off + n; i < len(whole); i++ {
					if whole[i] != 7.25 {
						t.Fatalf("%s LUT n=%d off=%d wrote past dst", v.Name, n, off)
					}
				}
			}
		}
	}
}

func TestLUTMatchesTable(t *testing.T) {
	t.Run("float32", testLUT[float32])
	t.Run("float64", testLUT[float64])
}

// namedFloat checks that types whose underlying type is float32 share its
// kernels.
type namedFloat float32

func TestNamedTypesUseKernels(t *testing.T) {
	s := sgdCases[namedFloat]()[0]
	checkAgainstGo(t, "named Momentum", 3, func(v Variant, xs [][]namedFloat) { s.Momentum(v, xs[0], xs[1], xs[2]) })
}

func TestBestAndLookup(t *testing.T) {
	t.Setenv(VariantEnv, "")
	if v, err := Best(); err != nil || v.Name != Variants()[0].Name {
		t.Fatalf("Best = %v, %v; want %s", v.Name, err, Variants()[0].Name)
	}
	t.Setenv(VariantEnv, "go")
	if v, err := Best(); err != nil || v.Name != "go" {
		t.Fatalf("Best with %s=go: %v %v", VariantEnv, v.Name, err)
	}
	t.Setenv(VariantEnv, "nonesuch")
	if _, err := Best(); err == nil {
		t.Fatal("Best accepted an unknown variant")
	}
	for _, name := range allNames() {
		if _, err := Lookup(name); err != nil {
			t.Logf("%v", err)
		}
	}
}

func TestBestAllocatesNothing(t *testing.T) {
	for _, name := range append([]string{""}, allNames()...) {
		if _, err := Lookup(name); name != "" && err != nil {
			continue
		}
		t.Setenv(VariantEnv, name)
		if a := testing.AllocsPerRun(10, func() { _, _ = Best() }); a != 0 {
			t.Fatalf("Best with %s=%q allocates %v times", VariantEnv, name, a)
		}
	}
}

func TestKernelsAllocateNothing(t *testing.T) {
	p, g, b, m := make([]float32, 100), make([]float32, 100), make([]float32, 100), make([]float32, 100)
	src, table := make([]byte, 100), new([256]float32)
	s := sgdCases[float32]()[3]
	a := Adam[float32]{Decay: L2Decay}
	for _, v := range Variants() {
		allocs := testing.AllocsPerRun(10, func() {
			s.Plain(v, p, g)
			s.First(v, p, g, b)
			s.Momentum(v, p, g, b)
			a.Step(v, p, g, m, b)
			LUT(v, p, src, table)
		})
		if allocs != 0 {
			t.Fatalf("%s: the kernels allocate %v times", v.Name, allocs)
		}
	}
}
