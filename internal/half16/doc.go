// Package half16 is the vector kernels of the 16-bit floating-point
// formats (IEEE binary16, "float16", and bfloat16) in Go assembly generated
// by avo (the generator is the module in _asm; `go generate` rewrites
// kernels_amd64.s and kernels_amd64.go): widening to float32 (Decode),
// rounding from float32 (Encode), and the fused combine step of a
// reduction (Combine, Divide), which widens both operands, applies one
// float32 operation and rounds the result once, in one pass.
//
// The package knows the formats as bits (uint16); package numeric names
// them (numeric.Float16, numeric.BFloat16) and holds the scalar code that
// every kernel stands for, and package allreduce the combine step's
// definition. The kernels here compute exactly that scalar code's bits.
//
// Vocabulary:
//
//   - kernel: assembly that handles whole vectors of float32 lanes (8 with
//     AVX2, 16 with AVX-512), one vector per loop turn, and leaves the last
//     n%lanes elements to the caller's scalar code. Each exported function
//     returns how many leading elements it did (0 in the "go" variant).
//   - variant: one instruction set's kernels (avx512, avx2), chosen at run
//     time with golang.org/x/sys/cpu, or forced by name with the environment
//     variable RINGDDP_HALF16; the "go" variant has no kernels, so its
//     callers run their scalar code for every element, on every
//     architecture.
//   - canonical NaN: the quiet NaN a combine step returns for any NaN,
//     positive with payload zero (float16 0x7e00, bfloat16 0x7fc0), from
//     float32's 0x7fc00000.
//
// The steps, per lane:
//
//   - float16 widen: VCVTPH2PS, exact; a signalling NaN gets its quiet bit,
//     the payload stays (subnormals widen to float32 normals; Go runs with
//     MXCSR's denormals-are-zero off).
//   - float16 narrow: VCVTPS2PH with immediate 0: round to nearest, ties to
//     even, whatever MXCSR's rounding mode; overflow to ±Inf, float16
//     subnormals produced (not flushed); a NaN keeps its sign and the top
//     10 bits of its payload and gets its quiet bit.
//   - bfloat16 widen: the 16 bits become the top half of a float32 (zero
//     extension, shift left by 16); a NaN lane gets float32's quiet bit
//     0x00400000.
//   - bfloat16 narrow: x + 0x7fff + ((x>>16)&1), shifted right by 16 (round
//     to nearest, ties to even, a carry moving into the exponent and past
//     the largest finite value making Inf); a NaN lane first becomes (x |
//     0x00400000) with its low 16 bits cleared, so it keeps its sign and top
//     payload bits and is quiet. VCVTNEPS2BF16 is not used: it flushes
//     subnormals to zero, which the scalar code does not.
//   - combine: widen a and b, one VADDPS, VMULPS, VMAXPS or VMINPS (Max and
//     Min pick b only when b > a, so equal operands, ±0 included, give a, as
//     the scalar code's comparison does), NaN lanes (of the result; of
//     either input for Max and Min) replaced by the canonical NaN, narrow.
//     Divide is the same with one VDIVPS by the divisor.
//
// Why the bits equal the scalar code's: the float32 operations are the
// ones the scalar code performs, each one IEEE operation rounded to
// float32 with Go's default MXCSR (round to nearest, no flush to zero);
// which NaN x86 returns does not matter, since every NaN of a combine
// becomes the canonical one; the conversions' NaN, overflow and subnormal
// rules are the scalar code's rules (listed above); lanes are independent,
// so the vector width and the split between kernel and tail change
// nothing. The tests compare every variant with the scalar code over all
// 65536 patterns of each format and every rounding boundary.
package half16

//go:generate sh -c "cd _asm && go run . -out ../kernels_amd64.s -stubs ../kernels_amd64.go -pkg half16"
