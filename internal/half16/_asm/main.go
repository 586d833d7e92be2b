// Command asm generates the kernels of package half16 with avo.
//
//	cd internal/half16/_asm && go run . -out ../kernels_amd64.s -stubs ../kernels_amd64.go -pkg half16
//
// (`go generate ./internal/half16` runs exactly that.) It is a module of its
// own so that avo is a dependency of the generator only.
//
// Every kernel walks its slices one vector of float32 lanes at a time (8
// with AVX2, 16 with AVX-512) and handles the first n - n%lanes elements
// only; the caller does the rest with the scalar code. The steps of each
// conversion are in package half16's doc; the generator emits them as:
//
//   - float16 widen: VCVTPH2PS; narrow: VCVTPS2PH with immediate 0 (round to
//     nearest even, regardless of MXCSR).
//   - bfloat16 widen: zero-extend each 16-bit lane to 32 bits and shift it
//     left by 16; narrow: x + 0x7fff + ((x>>16)&1), shifted right by 16 and
//     packed to 16 bits (VPACKUSDW with AVX2, VPMOVDW with AVX-512).
//   - NaN lanes: VCMPPS with predicate 3 (unordered) gives the mask; a
//     blend (VBLENDVPS, or VBLENDMPS under a K mask) replaces those lanes.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// isa describes one instruction set's vectors of float32.
type isa struct {
	name  string // suffix of the kernel's name
	lanes int    // float32 lanes per vector
}

var (
	avx512 = isa{name: "AVX512", lanes: 16}
	avx2   = isa{name: "AVX2", lanes: 8}
)

func (x isa) wide() bool { return x.lanes == 16 }

// vec returns vector register i of x's width.
func (x isa) vec(i int) VecPhysical {
	if x.wide() {
		return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15}[i]
	}
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}

// half returns the register of half x's width with number i (the 16-bit
// lanes of one vector of float32).
func (x isa) half(i int) VecPhysical {
	if x.wide() {
		return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
	}
	return []VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15}[i]
}

// Registers 8 to 15 hold the constants; 0 to 7 the data.
const (
	rCanon = 8  // 0x7fc00000: float32's quiet NaN with payload zero
	rOne   = 9  // 1
	rRound = 10 // 0x7fff
	rQuiet = 11 // 0x00400000: float32's quiet bit
	rHigh  = 12 // 0xffff0000
	rDiv   = 13 // the divisor
	rMask  = 14 // the NaN mask (AVX2)
	// X15 is scratch: constant moves through it.
)

// constant broadcasts the 32-bit value c into vector register r.
func constant(x isa, r int, c uint32) {
	MOVL(U32(c), R8L)
	VMOVD(R8L, X15)
	VPBROADCASTD(X15, x.vec(r))
}

// format is a 16-bit floating-point format.
type format struct {
	name string
	f16  bool // IEEE binary16; else bfloat16
}

var (
	float16  = format{name: "F16", f16: true}
	bfloat16 = format{name: "BF16"}
)

// constants loads the constants f's conversions need.
func constants(x isa, f format) {
	constant(x, rCanon, 0x7fc0_0000)
	constant(x, rQuiet, 0x0040_0000)
	if !f.f16 {
		constant(x, rOne, 1)
		constant(x, rRound, 0x7fff)
		constant(x, rHigh, 0xffff_0000)
	}
}

// widen loads one vector of f's values from m into vector register d as
// float32, exactly (NaN lanes of bfloat16 keep their quiet bit as it was:
// quiet is what quieten adds).
func widen(x isa, f format, m Mem, d int) {
	if f.f16 {
		VCVTPH2PS(m, x.vec(d))
		return
	}
	VPMOVZXWD(m, x.vec(d))
	VPSLLD(U8(16), x.vec(d), x.vec(d))
}

// nanMask sets the NaN mask (K1, or register rMask) to the lanes where a or
// b (vector registers) is NaN.
func nanMask(x isa, a, b int) {
	if x.wide() {
		VCMPPS(U8(3), x.vec(b), x.vec(a), K1)
		return
	}
	VCMPPS(U8(3), x.vec(b), x.vec(a), x.vec(rMask))
}

// blend sets the lanes of register d that the NaN mask selects to those
// of register s.
func blend(x isa, s, d int) {
	if x.wide() {
		VBLENDMPS(x.vec(s), x.vec(d), K1, x.vec(d))
		return
	}
	VBLENDVPS(x.vec(rMask), x.vec(s), x.vec(d), x.vec(d))
}

// or and and are the bitwise operations of x's width: d = a op b.
func or(x isa, a, b, d int) {
	if x.wide() {
		VPORD(x.vec(b), x.vec(a), x.vec(d))
		return
	}
	VPOR(x.vec(b), x.vec(a), x.vec(d))
}

func and(x isa, a, b, d int) {
	if x.wide() {
		VPANDD(x.vec(b), x.vec(a), x.vec(d))
		return
	}
	VPAND(x.vec(b), x.vec(a), x.vec(d))
}

// narrow rounds register s (float32, NaN lanes already what they should
// become) to f, ties to even, and stores the vector of 16-bit lanes at m.
// Registers t and t+1 are scratch.
func narrow(x isa, f format, s int, m Mem, t int) {
	if f.f16 {
		VCVTPS2PH(U8(0), x.vec(s), m)
		return
	}
	VPSRLD(U8(16), x.vec(s), x.vec(t))
	and(x, t, rOne, t)
	VPADDD(x.vec(s), x.vec(t), x.vec(t))
	VPADDD(x.vec(rRound), x.vec(t), x.vec(t))
	VPSRLD(U8(16), x.vec(t), x.vec(t))
	if x.wide() {
		VPMOVDW(x.vec(t), m)
		return
	}
	VEXTRACTI128(U8(1), x.vec(t), x.half(t+1))
	VPACKUSDW(x.half(t+1), x.half(t), x.half(t))
	VMOVDQU(x.half(t), m)
}

// step is a pointer that the loop advances by a number of bytes.
type step struct {
	reg Register
	by  int
}

// loop emits the loop over n/lanes vectors: body once per vector, then
// each pointer advanced by its bytes per vector; after it the kernel
// returns.
func loop(name string, x isa, n Register, steps []step, body func()) {
	SHRQ(U8(log2(x.lanes)), n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	body()
	for _, s := range steps {
		ADDQ(U32(s.by), s.reg)
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

func log2(n int) int {
	k := 0
	for ; n > 1; n >>= 1 {
		k++
	}
	return k
}

// decode is Decode: dst[i] = src[i] widened, a NaN quiet.
func decode(x isa, f format) {
	name := fmt.Sprintf("decode%s%s", f.name, x.name)
	TEXT(name, NOSPLIT, "func(dst *float32, src *uint16, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s widens the first n - n%%%d elements of src into dst.", name, x.lanes))
	dst, src, n := Load(Param("dst"), RDI), Load(Param("src"), RSI), Load(Param("n"), RCX)
	constants(x, f)
	loop(name, x, n, []step{{dst, 4 * x.lanes}, {src, 2 * x.lanes}}, func() {
		widen(x, f, Mem{Base: src}, 0)
		if !f.f16 { // quieten: NaN lanes get the quiet bit
			nanMask(x, 0, 0)
			or(x, 0, rQuiet, 1)
			blend(x, 1, 0)
		}
		VMOVUPS(x.vec(0), Mem{Base: dst})
	})
}

// encode is Encode: dst[i] = src[i] rounded, a NaN keeping its sign and
// top payload bits, quiet.
func encode(x isa, f format) {
	name := fmt.Sprintf("encode%s%s", f.name, x.name)
	TEXT(name, NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s rounds the first n - n%%%d elements of src into dst.", name, x.lanes))
	dst, src, n := Load(Param("dst"), RDI), Load(Param("src"), RSI), Load(Param("n"), RCX)
	constants(x, f)
	loop(name, x, n, []step{{dst, 2 * x.lanes}, {src, 4 * x.lanes}}, func() {
		VMOVUPS(Mem{Base: src}, x.vec(0))
		if !f.f16 { // NaN lanes: (x | quiet) with the low 16 bits cleared
			nanMask(x, 0, 0)
			or(x, 0, rQuiet, 1)
			and(x, 1, rHigh, 1)
			blend(x, 1, 0)
		}
		narrow(x, f, 0, Mem{Base: dst}, 2)
	})
}

// operation is one combine operator: emit sets register 2 to a op b
// (registers 0 and 1) with the scalar code's choice of operand.
type operation struct {
	name        string
	nanOfInputs bool // the NaN mask comes from the inputs (Max, Min pass a NaN on without arithmetic)
	emit        func(x isa)
}

var operations = []operation{
	{name: "Add", emit: func(x isa) { VADDPS(x.vec(1), x.vec(0), x.vec(2)) }},
	{name: "Mul", emit: func(x isa) { VMULPS(x.vec(1), x.vec(0), x.vec(2)) }},
	// b > a ? b : a, and a when they are equal (±0 included): VMAXPS
	// returns its second source unless the first is greater.
	{name: "Max", nanOfInputs: true, emit: func(x isa) { VMAXPS(x.vec(0), x.vec(1), x.vec(2)) }},
	{name: "Min", nanOfInputs: true, emit: func(x isa) { VMINPS(x.vec(0), x.vec(1), x.vec(2)) }},
}

// combine is Combine: out[i] = narrow(widen(a[i]) op widen(b[i])), a NaN
// the canonical one.
func combine(x isa, f format, op operation) {
	name := fmt.Sprintf("combine%s%s%s", f.name, op.name, x.name)
	TEXT(name, NOSPLIT, "func(out, a, b *uint16, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s combines the first n - n%%%d elements of a and b into out.", name, x.lanes))
	out, a, b := Load(Param("out"), RDI), Load(Param("a"), RSI), Load(Param("b"), RDX)
	n := Load(Param("n"), RCX)
	constants(x, f)
	by := 2 * x.lanes
	loop(name, x, n, []step{{out, by}, {a, by}, {b, by}}, func() {
		widen(x, f, Mem{Base: a}, 0)
		widen(x, f, Mem{Base: b}, 1)
		op.emit(x)
		if op.nanOfInputs {
			nanMask(x, 0, 1)
		} else {
			nanMask(x, 2, 2)
		}
		blend(x, rCanon, 2)
		narrow(x, f, 2, Mem{Base: out}, 3)
	})
}

// divide is Divide: s[i] = narrow(widen(s[i]) / d), a NaN the canonical one.
func divide(x isa, f format) {
	name := fmt.Sprintf("divide%s%s", f.name, x.name)
	TEXT(name, NOSPLIT, "func(s *uint16, n int, d float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s divides the first n - n%%%d elements of s by d.", name, x.lanes))
	s, n := Load(Param("s"), RDI), Load(Param("n"), RCX)
	d, err := Param("d").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(d.Addr, x.vec(rDiv))
	constants(x, f)
	loop(name, x, n, []step{{s, 2 * x.lanes}}, func() {
		widen(x, f, Mem{Base: s}, 0)
		VDIVPS(x.vec(rDiv), x.vec(0), x.vec(2))
		nanMask(x, 2, 2)
		blend(x, rCanon, 2)
		narrow(x, f, 2, Mem{Base: s}, 3)
	})
}

func main() {
	ConstraintExpr("amd64")
	for _, x := range []isa{avx512, avx2} {
		for _, f := range []format{float16, bfloat16} {
			decode(x, f)
			encode(x, f)
			for _, op := range operations {
				combine(x, f, op)
			}
			divide(x, f)
		}
	}
	Generate()
}
