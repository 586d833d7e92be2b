package numeric

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/ringddp/ringddp/internal/half16"
)

// format16 describes a 16-bit binary floating-point format for the
// independent reference: its exponent and mantissa widths.
type format16 struct {
	name          string
	expBits, mant int
	encode        func(float32) uint16
	decode        func(uint16) float32
}

var formats = []format16{
	{"Float16", 5, 10,
		func(f float32) uint16 { return uint16(Float16FromFloat32(f)) },
		func(h uint16) float32 { return Float16(h).Float32() }},
	{"BFloat16", 8, 7,
		func(f float32) uint16 { return uint16(BFloat16FromFloat32(f)) },
		func(h uint16) float32 { return BFloat16(h).Float32() }},
}

func (f format16) bias() int       { return 1<<(f.expBits-1) - 1 }
func (f format16) infCode() uint16 { return uint16(1<<f.expBits-1) << f.mant }

// value is the code's magnitude by the textbook formula, in float64 (exact
// for both formats); the Inf code gets 2^(emax+1), the value rounding
// treats it as.
func (f format16) value(code uint16) float64 {
	code &= 0x7fff
	e := int(code >> f.mant)
	m := float64(code & (1<<f.mant - 1))
	if e == 0 {
		return math.Ldexp(m, 1-f.bias()-f.mant)
	}
	return math.Ldexp(1+m/float64(int(1)<<f.mant), e-f.bias())
}

// nearest is the reference rounding of x (finite, float64): the code of the
// nearest value, ties to the even code; values from the midpoint below
// 2^(emax+1) upwards give the Inf code.
func (f format16) nearest(x float64, vals []float64) uint16 {
	sign := uint16(0)
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	k := sort.SearchFloat64s(vals, x) // first code with value ≥ x
	if k == len(vals) {
		return sign | f.infCode()
	}
	if vals[k] != x {
		below, above := x-vals[k-1], vals[k]-x // exact: see the test's doc
		if below < above || below == above && (k-1)%2 == 0 {
			k--
		}
	}
	return sign | uint16(k)
}

// TestDecodeAll checks all 65536 codes of each format: Float32 gives the
// textbook value (NaNs: sign and payload kept, quiet bit set), and every
// non-NaN code survives the round trip through float32 bit for bit (a NaN
// comes back quiet).
func TestDecodeAll(t *testing.T) {
	for _, f := range formats {
		inf := f.infCode()
		for c := 0; c < 1<<16; c++ {
			h := uint16(c)
			got := f.decode(h)
			mag := h & 0x7fff
			switch {
			case mag > inf:
				want := uint32(h&0x8000)<<16 | 0x7fc0_0000 | uint32(h&(1<<f.mant-1))<<(23-f.mant)
				if math.Float32bits(got) != want {
					t.Fatalf("%s %#04x: NaN decodes to %#08x, want %#08x", f.name, h, math.Float32bits(got), want)
				}
				if back := f.encode(got); back != h|1<<(f.mant-1) {
					t.Fatalf("%s %#04x: NaN round-trips to %#04x, want %#04x", f.name, h, back, h|1<<(f.mant-1))
				}
				continue
			case mag == inf:
				if !math.IsInf(float64(got), 0) || math.Signbit(float64(got)) != (h&0x8000 != 0) {
					t.Fatalf("%s %#04x: decodes to %v, want Inf", f.name, h, got)
				}
			default:
				want := f.value(h)
				if h&0x8000 != 0 {
					want = -want
				}
				if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
					t.Fatalf("%s %#04x: decodes to %g, want %g", f.name, h, got, want)
				}
			}
			if back := f.encode(got); back != h {
				t.Fatalf("%s %#04x: round-trips to %#04x", f.name, h, back)
			}
		}
	}
}

// TestEncodeRounding checks narrowing against the reference nearest at
// every code's value, at every midpoint between neighbouring codes (the
// ties, exact in float32 for both formats), one float32 ulp either side of
// both, the overflow threshold, float32 subnormals, and random float32
// bit patterns; both signs. The reference's differences are exact in
// float64: x and its two neighbours lie within one binade step of each
// other and are all multiples of 2^-149.
func TestEncodeRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 16))
	for _, f := range formats {
		inf := f.infCode()
		vals := make([]float64, inf+1)
		for c := range vals {
			vals[c] = f.value(uint16(c))
		}
		var xs []float32
		for c := 0; c < int(inf); c++ {
			v, mid := float32(vals[c]), float32((vals[c]+vals[c+1])/2)
			if float64(mid) != (vals[c]+vals[c+1])/2 {
				t.Fatalf("%s: midpoint above %#04x not exact in float32", f.name, c)
			}
			for _, x := range []float32{v, mid} {
				xs = append(xs, x, math.Nextafter32(x, 0), math.Nextafter32(x, math.MaxFloat32))
			}
		}
		for i := 0; i < 1<<17; i++ {
			x := math.Float32frombits(rng.Uint32())
			if x == x && !math.IsInf(float64(x), 0) {
				xs = append(xs, x)
			}
		}
		xs = append(xs, math.SmallestNonzeroFloat32, 0x1p-126, math.Nextafter32(0x1p-126, 0), math.MaxFloat32)
		for _, x := range xs {
			for _, s := range []float32{1, -1} {
				x := x * s
				want := f.nearest(float64(x), vals)
				if got := f.encode(x); got != want {
					t.Fatalf("%s: %g (%#08x) encodes to %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
				}
			}
		}
	}
}

// TestEncodeSpecials pins the special values of the package doc.
func TestEncodeSpecials(t *testing.T) {
	inf32 := float32(math.Inf(1))
	cases := []struct {
		in       float32
		f16, b16 uint16
	}{
		{0, 0, 0},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{inf32, 0x7c00, 0x7f80},
		{-inf32, 0xfc00, 0xff80},
		{65504, 0x7bff, 0x4780},          // bf16: above the midpoint 65408
		{65519.99609375, 0x7bff, 0x4780}, // one float32 ulp below the tie
		{65520, 0x7c00, 0x4780},
		{-1e6, 0xfc00, 0xc974},
		{math.MaxFloat32, 0x7c00, 0x7f80},                           // bf16 overflow: rounds to Inf
		{0x1p-24, 0x0001, 0x3380},                                   // smallest f16 subnormal
		{0x1p-25, 0x0000, 0x3300},                                   // a tie: to even, 0
		{0x1.000002p-25, 0x0001, 0x3300},                            // just above the tie
		{-0x1p-25, 0x8000, 0xb300},                                  // keeps its sign
		{math.SmallestNonzeroFloat32, 0, 0},                         // below half of either's smallest
		{0x1p-133, 0, 1},                                            // the smallest bf16 subnormal
		{math.Float32frombits(0x7f80_0001), 0x7e00, 0x7fc0},         // signalling NaN, tiny payload
		{math.Float32frombits(0xffa0_0000), 0xfe00 | 0x100, 0xffe0}, // negative sNaN, payload kept
		{math.Float32frombits(0x7fc0_0000), 0x7e00, 0x7fc0},
	}
	for _, c := range cases {
		if got := uint16(Float16FromFloat32(c.in)); got != c.f16 {
			t.Errorf("Float16FromFloat32(%g = %#08x) = %#04x, want %#04x", c.in, math.Float32bits(c.in), got, c.f16)
		}
		if got := uint16(BFloat16FromFloat32(c.in)); got != c.b16 {
			t.Errorf("BFloat16FromFloat32(%g = %#08x) = %#04x, want %#04x", c.in, math.Float32bits(c.in), got, c.b16)
		}
	}
}

func TestSliceConverters(t *testing.T) {
	src := []float32{1, -2.5, 65504, 1e-8, float32(math.NaN())}
	h := make([]Float16, len(src))
	b := make([]BFloat16, len(src))
	EncodeFloat16(h, src)
	EncodeBFloat16(b, src)
	back, backB := make([]float32, len(src)), make([]float32, len(src))
	DecodeFloat16(back, h)
	DecodeBFloat16(backB, b)
	for i, x := range src {
		if h[i] != Float16FromFloat32(x) || b[i] != BFloat16FromFloat32(x) {
			t.Errorf("element %d: slice encoders differ from the scalar ones", i)
		}
		if math.Float32bits(back[i]) != math.Float32bits(h[i].Float32()) || math.Float32bits(backB[i]) != math.Float32bits(b[i].Float32()) {
			t.Errorf("element %d: slice decoders differ from the scalar ones", i)
		}
	}
	for name, f := range map[string]func(){
		"EncodeFloat16":  func() { EncodeFloat16(h[:1], src) },
		"DecodeFloat16":  func() { DecodeFloat16(back, h[:2]) },
		"EncodeBFloat16": func() { EncodeBFloat16(b, src[:3]) },
		"DecodeBFloat16": func() { DecodeBFloat16(back[:0], b) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with unequal lengths did not panic", name)
				}
			}()
			f()
		}()
	}
}

// The slice converters give the scalar functions' bits in every variant of
// internal/half16 this CPU runs (the kernels' own tests go through every
// pattern; this one checks the hand-over between kernel and tail): codes
// spread over all 65536 (an odd multiple of the index) through the
// decoders, the same widened and with a random low half through the
// encoders, at lengths with every tail. Under 0.5 s with -race.
func TestSliceConvertersEveryVariant(t *testing.T) {
	bits := make([]uint16, 1<<16)
	wide := make([]float32, 1<<16)
	r := rand.New(rand.NewPCG(16, 35))
	for i := range bits {
		bits[i] = uint16(i * 40503)
		wide[i] = math.Float32frombits(uint32(bits[i])<<16 | r.Uint32()&0xffff)
	}
	for _, v := range half16.Variants() {
		t.Setenv(half16.VariantEnv, v.Name)
		for _, n := range []int{0, 1, 7, 8, 9, 17, 1<<13 + 5} {
			h, b := make([]Float16, n), make([]BFloat16, n)
			fh, fb := make([]float32, n), make([]float32, n)
			for i := range n {
				h[i], b[i] = Float16(bits[i]), BFloat16(bits[i])
			}
			DecodeFloat16(fh, h)
			DecodeBFloat16(fb, b)
			for i := range n {
				if math.Float32bits(fh[i]) != math.Float32bits(h[i].Float32()) || math.Float32bits(fb[i]) != math.Float32bits(b[i].Float32()) {
					t.Fatalf("%s, %d elements: element %d (%#04x) decodes to %#08x, %#08x", v.Name, n, i, bits[i], math.Float32bits(fh[i]), math.Float32bits(fb[i]))
				}
			}
			EncodeFloat16(h, wide[:n])
			EncodeBFloat16(b, wide[:n])
			for i, x := range wide[:n] {
				if h[i] != Float16FromFloat32(x) || b[i] != BFloat16FromFloat32(x) {
					t.Fatalf("%s, %d elements: element %d (%#08x) encodes to %#04x, %#04x", v.Name, n, i, math.Float32bits(x), h[i], b[i])
				}
			}
		}
	}
}
