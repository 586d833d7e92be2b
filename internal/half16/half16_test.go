package half16_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ringddp/ringddp/internal/cpuvariant"
	"github.com/ringddp/ringddp/internal/half16"
	"github.com/ringddp/ringddp/numeric"
)

// The reference is package numeric's scalar code, element by element, and
// for the combine step the definition that package allreduce's scalar code
// implements: widen both, one float32 operation, a NaN the canonical one,
// round once.

// variants returns the assembly variants this CPU runs, skipping the test
// where there are none.
func variants(t *testing.T) []half16.Variant {
	run, skipped := cpuvariant.Split(half16.AllVariants())
	if skipped != "" {
		t.Log(skipped)
	}
	if len(run) == 0 {
		t.Skip("no assembly variant runs on this CPU")
	}
	return run
}

var formats = []struct {
	name  string
	f     half16.Format
	widen func(uint16) float32
	round func(float32) uint16
	canon uint16
}{
	{"float16", half16.Float16, func(h uint16) float32 { return numeric.Float16(h).Float32() },
		func(f float32) uint16 { return uint16(numeric.Float16FromFloat32(f)) }, 0x7e00},
	{"bfloat16", half16.BFloat16, func(h uint16) float32 { return numeric.BFloat16(h).Float32() },
		func(f float32) uint16 { return uint16(numeric.BFloat16FromFloat32(f)) }, 0x7fc0},
}

// offsets start the slices off any vector boundary.
var offsets = []int{0, 1, 3}

// checkDone fails unless a kernel did the whole vectors of n elements.
func checkDone(t *testing.T, what string, v *half16.Variant, done, n int) {
	t.Helper()
	lanes := map[string]int{"avx512": 16, "avx2": 8}[v.Name]
	if want := n - n%lanes; done != want {
		t.Fatalf("%s %s did %d of %d elements, want %d", v.Name, what, done, n, want)
	}
}

// Widening: every one of the 65536 patterns of each format.
func TestDecodeEveryPattern(t *testing.T) {
	src := make([]uint16, 1<<16+3)
	for i := range 1 << 16 {
		src[i] = uint16(i)
	}
	for _, v := range variants(t) {
		for _, f := range formats {
			for _, off := range offsets {
				in := src[off : off+1<<16]
				dst := make([]float32, len(in))
				for i := range dst {
					dst[i] = 12345 // a sentinel: the tail must stay as it was
				}
				done := half16.Decode(&v, f.f, dst, in)
				checkDone(t, "Decode", &v, done, len(in))
				for i, h := range in {
					want := f.widen(h)
					if i >= done {
						want = 12345
					}
					if got := dst[i]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s %s offset %d: %#04x widens to %#08x, want %#08x", v.Name, f.name, off, h, math.Float32bits(got), math.Float32bits(want))
					}
				}
			}
		}
	}
}

// narrowInputs returns float32 bit patterns around every rounding boundary
// of both formats, and seeded random ones.
func narrowInputs() []float32 {
	var in []float32
	add := func(b uint32) { in = append(in, math.Float32frombits(b), math.Float32frombits(b^0x8000_0000)) }
	// Every float16 value, the midpoints (ties) between neighbours, and one
	// float32 step either side of each; the last midpoint, 65520, is where
	// rounding reaches Inf. Subnormals of float16 are among them.
	for h := range uint32(0x7c00) {
		x := float64(numeric.Float16(h).Float32())
		next := 65536.0
		if h < 0x7bff {
			next = float64(numeric.Float16(h + 1).Float32())
		}
		for _, y := range []float64{x, (x + next) / 2} {
			b := math.Float32bits(float32(y))
			add(b)
			add(b + 1)
			if b > 0 {
				add(b - 1)
			}
		}
	}
	// Every bfloat16 top half with the low halves at and around a tie:
	// every exponent, NaNs whose payload lies only in the low bits, the
	// rounding to Inf past 0x7f7f, float32 subnormals.
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff} {
			in = append(in, math.Float32frombits(hi<<16|lo))
		}
	}
	// float16's NaN payloads: each of the 13 low bits and the quiet bit.
	for bit := range uint32(23) {
		add(0x7f80_0000 | 1<<bit)
		add(0x7f80_0000 | 1<<bit | 0x0040_0000)
	}
	n := 1 << 18
	if raceEnabled {
		n = 1 << 14
	}
	r := rand.New(rand.NewPCG(35, 16))
	for range n {
		in = append(in, math.Float32frombits(r.Uint32()))
	}
	return in
}

// Narrowing: every boundary class and a seeded random set.
func TestEncodeBoundaries(t *testing.T) {
	all := narrowInputs()
	if raceEnabled {
		all = all[len(all)-1<<15:] // the bfloat16 ties' tail and the random set
	}
	for _, f := range formats {
		want := make([]uint16, len(all))
		for i, x := range all {
			want[i] = f.round(x)
		}
		for _, v := range variants(t) {
			for _, off := range offsets {
				in := all[off:]
				dst := make([]uint16, len(in))
				for i := range dst {
					dst[i] = 0xdead
				}
				done := half16.Encode(&v, f.f, dst, in)
				checkDone(t, "Encode", &v, done, len(in))
				for i, x := range in {
					w := want[off+i]
					if i >= done {
						w = 0xdead
					}
					if dst[i] != w {
						t.Fatalf("%s %s offset %d: %#08x rounds to %#04x, want %#04x", v.Name, f.name, off, math.Float32bits(x), dst[i], w)
					}
				}
			}
		}
	}
}

// specials16 are the 16-bit patterns of each format that take other paths
// through a combine step: ±0, the smallest and largest subnormals, the
// smallest normal, the largest finite, ±Inf, NaNs (quiet and signalling,
// either sign, payloads), ±1 and values whose sums and products round.
var specials16 = [2][]uint16{
	{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
		0x7e00, 0x7d00, 0xfe01, 0x7c01, 0x3c00, 0xbc00, 0x3555, 0x5bff, 0x0200, 0x3c01},
	{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
		0x7fc0, 0x7f81, 0xffc1, 0x7fa0, 0x3f80, 0xbf80, 0x3eab, 0x4b00, 0x0040, 0x3f81},
}

// combineInputs returns a and b: every pair of specials, then seeded
// random patterns.
func combineInputs(f half16.Format) (a, b []uint16) {
	s := specials16[f]
	for _, x := range s {
		for _, y := range s {
			a, b = append(a, x), append(b, y)
		}
	}
	n := 1 << 16
	if raceEnabled {
		n = 1 << 12
	}
	r := rand.New(rand.NewPCG(uint64(f), 35))
	for range n {
		a, b = append(a, uint16(r.Uint32())), append(b, uint16(r.Uint32()))
	}
	return a, b
}

var ops = []struct {
	name string
	op   half16.Op
	f    func(x, y float32) float32
}{
	{"Add", half16.Add, func(x, y float32) float32 { return x + y }},
	{"Mul", half16.Mul, func(x, y float32) float32 { return x * y }},
	{"Max", half16.Max, func(x, y float32) float32 {
		if y > x || y != y {
			x = y
		}
		return x
	}},
	{"Min", half16.Min, func(x, y float32) float32 {
		if y < x || y != y {
			x = y
		}
		return x
	}},
}

// narrowCanon is the combine step's rounding: a NaN the canonical one.
func narrowCanon(f float32, round func(float32) uint16, canon uint16) uint16 {
	if f != f {
		return canon
	}
	return round(f)
}

func TestCombine(t *testing.T) {
	for _, f := range formats {
		a, b := combineInputs(f.f)
		for _, op := range ops {
			want := make([]uint16, len(a))
			for i := range a {
				want[i] = narrowCanon(op.f(f.widen(a[i]), f.widen(b[i])), f.round, f.canon)
			}
			for _, v := range variants(t) {
				for _, off := range offsets {
					out := make([]uint16, len(a)-off)
					done := half16.Combine(&v, f.f, op.op, out, a[off:], b[off:])
					checkDone(t, "Combine", &v, done, len(out))
					for i := range done {
						if out[i] != want[off+i] {
							t.Fatalf("%s %s %s offset %d: %#04x, %#04x give %#04x, want %#04x", v.Name, f.name, op.name, off, a[off+i], b[off+i], out[i], want[off+i])
						}
					}
				}
				// out aliasing a, then b.
				for _, alias := range []int{0, 1} {
					x, y := append([]uint16(nil), a...), append([]uint16(nil), b...)
					out := [][]uint16{x, y}[alias]
					done := half16.Combine(&v, f.f, op.op, out, x, y)
					for i := range done {
						if out[i] != want[i] {
							t.Fatalf("%s %s %s, out aliasing operand %d: element %d is %#04x, want %#04x", v.Name, f.name, op.name, alias, i, out[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestDivide(t *testing.T) {
	for _, f := range formats {
		s, _ := combineInputs(f.f)
		for _, d := range []float32{1, 2, 3, 5, 8, 1000} {
			want := make([]uint16, len(s))
			for i, h := range s {
				want[i] = narrowCanon(f.widen(h)/d, f.round, f.canon)
			}
			for _, v := range variants(t) {
				got := append([]uint16(nil), s...)
				done := half16.Divide(&v, f.f, got, d)
				checkDone(t, "Divide", &v, done, len(got))
				for i := range got {
					w := want[i]
					if i >= done {
						w = s[i]
					}
					if got[i] != w {
						t.Fatalf("%s %s: %#04x / %v gives %#04x, want %#04x", v.Name, f.name, s[i], d, got[i], w)
					}
				}
			}
		}
	}
}

// The go variant does nothing: its callers run their scalar code.
func TestGoVariantLeavesEverything(t *testing.T) {
	v, err := half16.Lookup("go")
	if err != nil {
		t.Fatal(err)
	}
	x := make([]uint16, 64)
	f := make([]float32, 64)
	if half16.Decode(&v, half16.Float16, f, x)+half16.Encode(&v, half16.BFloat16, x, f)+
		half16.Combine(&v, half16.Float16, half16.Add, x, x, x)+half16.Divide(&v, half16.BFloat16, x, 2) != 0 {
		t.Fatal("the go variant handled elements")
	}
}

func TestBestLookupDefault(t *testing.T) {
	t.Setenv(half16.VariantEnv, "")
	if v, err := half16.Best(); err != nil || v.Name != half16.Variants()[0].Name {
		t.Fatalf("Best = %v, %v; want %s", v.Name, err, half16.Variants()[0].Name)
	}
	t.Setenv(half16.VariantEnv, "nonesuch")
	if _, err := half16.Best(); err == nil {
		t.Fatal("Best accepted an unknown variant")
	}
	if v := half16.Default(); v.Name != "go" {
		t.Fatalf("Default with an unknown variant named = %s, want go", v.Name)
	}
	for _, v := range half16.Variants() {
		t.Setenv(half16.VariantEnv, v.Name)
		if d := half16.Default(); d.Name != v.Name {
			t.Fatalf("Default with %s=%s = %s", half16.VariantEnv, v.Name, d.Name)
		}
		if a := testing.AllocsPerRun(10, func() { _ = half16.Default() }); a != 0 {
			t.Fatalf("Default allocates %v times", a)
		}
	}
}
