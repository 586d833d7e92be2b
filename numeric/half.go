package numeric

import (
	"math"
	"strconv"
	"unsafe"

	"github.com/ringddp/ringddp/internal/half16"
)

// Float16 is an IEEE 754 binary16 number ("half"), held as its 16 bits:
// 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. Its finite range
// is ±65504; below 2^-14 it is subnormal, down to 2^-24.
type Float16 uint16

// BFloat16 is a brain floating-point number, held as its 16 bits: the top
// half of an IEEE binary32 (1 sign bit, 8 exponent bits with bias 127, 7
// mantissa bits), so it has float32's range with 8 bits of precision.
type BFloat16 uint16

// Conversions between the 16-bit types and float32. Widening (Float32,
// Decode*) is exact for every value but a signalling NaN, which becomes
// quiet. Narrowing (*FromFloat32, Encode*) rounds to nearest, ties to even;
// a finite value beyond the type's range rounds to ±Inf exactly when it is
// at or past the midpoint between the largest finite value and the next
// power of two (65520 for Float16, 0x1.fep127 for BFloat16); ±0, ±Inf and
// subnormals keep their sign. A NaN stays a NaN:
// it keeps its sign and the top mantissa bits of its payload that fit, and
// its quiet bit is set (the top mantissa bit), as x86's F16C and AVX-512
// BF16 instructions do.

const (
	f32SignMask = 0x8000_0000
	f32ExpMask  = 0x7f80_0000
	f32ManMask  = 0x007f_ffff
	f32Quiet    = 0x0040_0000
)

// Float16FromFloat32 is f rounded to the nearest Float16, ties to even.
func Float16FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b &^ f32SignMask
	switch {
	case abs > f32ExpMask: // NaN: keep the top 9 payload bits, quiet it
		return Float16(sign | 0x7e00 | uint16(abs&f32ManMask>>13))
	case abs >= 0x477f_f000: // ≥ 65520, Inf included: rounds to Inf
		return Float16(sign | 0x7c00)
	case abs >= 0x3880_0000: // ≥ 2^-14: a normal Float16
		// Rebias the exponent (127 → 15) and round off 13 mantissa bits; a
		// carry out of the mantissa moves into the exponent, as it should.
		return Float16(sign | roundShift(abs-(112<<23), 13))
	case abs <= 0x3300_0000: // ≤ 2^-25, half the smallest subnormal: 0
		return Float16(sign)
	}
	// A Float16 subnormal: m·2^-24 for the integer m nearest |f|·2^24.
	// |f| = man·2^(e-150) with the implicit bit, so m = man >> (126-e);
	// e ≥ 102 here, so the shift is at most 24.
	e := abs >> 23
	man := abs&f32ManMask | 1<<23
	return Float16(sign | roundShift(man, 126-e))
}

// roundShift is x >> s rounded to nearest, ties to even, for 1 ≤ s ≤ 31;
// the result must fit in 16 bits.
func roundShift(x, s uint32) uint16 {
	r := x >> s
	rem := x & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++
	}
	return uint16(r)
}

// Float32 is h as a float32, exactly (a signalling NaN becomes quiet).
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man == 0: // ±Inf
		return math.Float32frombits(sign | f32ExpMask)
	case exp == 0x1f: // NaN
		return math.Float32frombits(sign | f32ExpMask | f32Quiet | man<<13)
	case exp == 0: // ±0 or subnormal: man·2^-24, exact in float32
		return math.Float32frombits(sign | math.Float32bits(float32(man)*0x1p-24))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// BFloat16FromFloat32 is f rounded to the nearest BFloat16, ties to even.
func BFloat16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&^f32SignMask > f32ExpMask { // NaN: keep the top 7 payload bits, quiet it
		return BFloat16(b>>16 | 0x0040)
	}
	// Round off the low 16 bits, ties to even. A carry moves into the
	// exponent, and past the largest finite value it makes Inf (0x7f80),
	// as rounding defines; Inf itself has zero low bits and stays.
	return BFloat16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Float32 is h as a float32, exactly (a signalling NaN becomes quiet).
func (h BFloat16) Float32() float32 {
	b := uint32(h) << 16
	if b&^f32SignMask > f32ExpMask {
		b |= f32Quiet
	}
	return math.Float32frombits(b)
}

// The slice converters hand the leading whole vectors to the kernels of
// internal/half16 (the variant half16.Default chooses: AVX-512, AVX2 with
// F16C, or none), which compute the same bits as the functions above, and
// convert the rest with those functions. The tail loops are a loop each,
// not one generic loop over a conversion function: that would cost an
// indirect call per element (the two types share one generic shape).

// EncodeFloat16 sets dst[i] = Float16FromFloat32(src[i]). It panics unless
// dst and src have the same length.
func EncodeFloat16(dst []Float16, src []float32) {
	checkLens(len(dst), len(src))
	v := half16.Default()
	done := half16.Encode(&v, half16.Float16, bitsOf(dst), src)
	for i, f := range src[done:] {
		dst[done+i] = Float16FromFloat32(f)
	}
}

// DecodeFloat16 sets dst[i] = src[i].Float32(). It panics unless dst and
// src have the same length.
func DecodeFloat16(dst []float32, src []Float16) {
	checkLens(len(dst), len(src))
	v := half16.Default()
	done := half16.Decode(&v, half16.Float16, dst, bitsOf(src))
	for i, h := range src[done:] {
		dst[done+i] = h.Float32()
	}
}

// EncodeBFloat16 sets dst[i] = BFloat16FromFloat32(src[i]). It panics
// unless dst and src have the same length.
func EncodeBFloat16(dst []BFloat16, src []float32) {
	checkLens(len(dst), len(src))
	v := half16.Default()
	done := half16.Encode(&v, half16.BFloat16, bitsOf(dst), src)
	for i, f := range src[done:] {
		dst[done+i] = BFloat16FromFloat32(f)
	}
}

// DecodeBFloat16 sets dst[i] = src[i].Float32(). It panics unless dst and
// src have the same length.
func DecodeBFloat16(dst []float32, src []BFloat16) {
	checkLens(len(dst), len(src))
	v := half16.Default()
	done := half16.Decode(&v, half16.BFloat16, dst, bitsOf(src))
	for i, h := range src[done:] {
		dst[done+i] = h.Float32()
	}
}

// bitsOf is s as its bits: the same memory, as []uint16.
func bitsOf[H Float16 | BFloat16](s []H) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func checkLens(dst, src int) {
	if dst != src {
		panic("numeric: 16-bit conversion of " + strconv.Itoa(src) + " elements into " + strconv.Itoa(dst))
	}
}
