// Command asm generates the GEMM micro-kernels of package gemm with avo.
//
//	cd internal/gemm/_asm && go run . -out ../kernels_amd64.s -stubs ../kernels_amd64.go -pkg gemm
//
// (`go generate ./internal/gemm` runs exactly that.) It is a module of its own so that
// avo is a dependency of the generator only, never of the library.
//
// Every kernel has the same contract, written for float32 (float64 is the same
// with 8-byte elements):
//
//	func kernel(kc int, a *float32, rsa, csa int, b *float32, rsb int, c *float32, ldc int, accumulate int)
//
// It multiplies an MR×kc block of A, element (i, p) at byte offset
// i·rsa + p·csa from a, by a kc×NR block of B whose rows are rsb bytes
// apart (element (p, j) at byte offset p·rsb + j·size from b: a packed
// micro-panel has rsb = NR elements, a row-major B its row stride), and adds the product to the MR×NR block of row-major C at
// c (row stride ldc elements), or stores it there when accumulate is 0:
//
//	C[i][j] (+)= Σ_p A(i, p) · B(p, j)   for i < MR, j < NR, p < kc
//
// The strides let one kernel read A packed (rsa = one element, csa = MR
// elements), straight from a row-major matrix (rsa = its row stride, csa
// = one element) or from a transposed one (rsa = one element, csa = its
// row stride): rows are reached from up to three base registers with the
// scaled-index modes, so A needs no packing when its rows are whole.
//
// The sum runs over p in increasing order with one fused multiply-add per
// term (no reassociation), so the result does not depend on how the caller
// split M and N between threads. The MR·NR/lanes accumulators stay in
// registers for the whole kc loop: per p the kernel loads NR/lanes vectors
// of B, broadcasts each of the MR elements of A once and issues MR·NR/lanes
// FMAs. C is read and written once, at the end.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// isa describes one instruction set's vectors.
type isa struct {
	name  string // suffix of the kernel's name
	bytes int    // vector width in bytes
	regs  int    // vector registers available
	vec   func(i int) VecPhysical
}

var (
	avx512 = isa{name: "AVX512", bytes: 64, regs: 32, vec: zmm}
	avx2   = isa{name: "AVX2", bytes: 32, regs: 16, vec: ymm}
)

func zmm(i int) VecPhysical {
	return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
}

func ymm(i int) VecPhysical {
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}

// elem describes one element type's instructions.
type elem struct {
	prefix string // "s" or "d", as in BLAS
	goType string
	bytes  int
	bcast  func(m, v Op)
	fma    func(b, a, acc Op) // acc += a*b
	add    func(m, v, d Op)
	move   func(src, dst Op)
}

var (
	f32 = elem{prefix: "s", goType: "float32", bytes: 4,
		bcast: func(m, v Op) { VBROADCASTSS(m, v) },
		fma:   func(b, a, acc Op) { VFMADD231PS(b, a, acc) },
		add:   func(m, v, d Op) { VADDPS(m, v, d) },
		move:  func(s, d Op) { VMOVUPS(s, d) }}
	f64 = elem{prefix: "d", goType: "float64", bytes: 8,
		bcast: func(m, v Op) { VBROADCASTSD(m, v) },
		fma:   func(b, a, acc Op) { VFMADD231PD(b, a, acc) },
		add:   func(m, v, d Op) { VADDPD(m, v, d) },
		move:  func(s, d Op) { VMOVUPD(s, d) }}
)

// unroll is how many steps of p one pass of the main loop takes.
const unroll = 4

// rowsPerBase is how many rows of A one base register reaches with the
// addressing modes (base), (base)(L*1), (base)(L*2), (base)(L3*1), (base)(L*4).
const rowsPerBase = 5

// kernel emits one micro-kernel: mr rows of A broadcast, nv vectors of B.
func kernel(e elem, x isa, mr, nv int) {
	lanes := x.bytes / e.bytes
	nr := nv * lanes
	if mr*nv+nv+1 > x.regs {
		panic(fmt.Sprintf("%dx%d needs more than %d registers", mr, nr, x.regs))
	}
	name := fmt.Sprintf("%sgemmKernel%dx%d%s", e.prefix, mr, nr, x.name)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(kc int, a *%[1]s, rsa, csa int, b *%[1]s, rsb int, c *%[1]s, ldc int, accumulate int)", e.goType))
	Doc(fmt.Sprintf("%s sets or adds to C (row stride ldc) a %d×kc block of A (rows rsa, steps csa bytes apart) times a kc×%d panel of B (steps rsb bytes apart).", name, mr, nr))
	kc := Load(Param("kc"), RCX)
	b := Load(Param("b"), RBX)
	rsb := Load(Param("rsb"), RDX) // DX holds ldc only once the loop is done
	c := Load(Param("c"), RDI)
	L := Load(Param("rsa"), R10)
	csa := Load(Param("csa"), R12)
	L3 := R11
	LEAQ(Mem{Base: L, Index: L, Scale: 2}, L3)
	bases := []GPPhysical{RAX, R8, R9}[:(mr+rowsPerBase-1)/rowsPerBase]
	Load(Param("a"), bases[0])
	for g := 1; g < len(bases); g++ {
		// bases[g] = bases[g-1] + 5·L
		LEAQ(Mem{Base: bases[g-1], Index: L, Scale: 4}, bases[g])
		ADDQ(L, bases[g])
	}
	rowA := func(i int) Mem {
		base := bases[i/rowsPerBase]
		switch i % rowsPerBase {
		case 0:
			return Mem{Base: base}
		case 1:
			return Mem{Base: base, Index: L, Scale: 1}
		case 2:
			return Mem{Base: base, Index: L, Scale: 2}
		case 3:
			return Mem{Base: base, Index: L3, Scale: 1}
		}
		return Mem{Base: base, Index: L, Scale: 4}
	}
	acc := func(i, v int) VecPhysical { return x.vec(i*nv + v) }
	bv := func(v int) VecPhysical { return x.vec(mr*nv + v) }
	av := x.vec(mr*nv + nv)

	Comment("Zero the accumulators.")
	for i := 0; i < mr*nv; i++ {
		if x.regs == 32 {
			VPXORD(x.vec(i), x.vec(i), x.vec(i))
		} else {
			VXORPS(x.vec(i), x.vec(i), x.vec(i))
		}
	}
	step := func(p int) {
		for v := 0; v < nv; v++ {
			e.move(Mem{Base: b, Disp: v * x.bytes}, bv(v))
		}
		ADDQ(rsb, b)
		for i := 0; i < mr; i++ {
			e.bcast(rowA(i), av)
			for v := 0; v < nv; v++ {
				e.fma(bv(v), av, acc(i, v))
			}
		}
		for _, base := range bases {
			ADDQ(csa, base)
		}
	}
	count := RSI
	MOVQ(kc, count)
	SHRQ(U8(2), count)
	JZ(LabelRef(name + "_tail"))
	Label(name + "_loop")
	for p := 0; p < unroll; p++ {
		step(p)
	}
	DECQ(count)
	JNZ(LabelRef(name + "_loop"))

	Label(name + "_tail")
	ANDQ(U8(unroll-1), kc)
	JZ(LabelRef(name + "_store"))
	Label(name + "_tailloop")
	step(0)
	DECQ(kc)
	JNZ(LabelRef(name + "_tailloop"))

	Label(name + "_store")
	ldc := Load(Param("ldc"), RDX)
	SHLQ(U8(shift(e.bytes)), ldc)
	flag := Load(Param("accumulate"), R13)
	TESTQ(flag, flag)
	JZ(LabelRef(name + "_set"))
	Comment("C += accumulators, a row at a time.")
	store(e, x, mr, nv, c, ldc, acc, true)
	Label(name + "_set")
	Comment("C = accumulators, a row at a time.")
	store(e, x, mr, nv, c, ldc, acc, false)
}

// store writes the accumulators to C, adding C's values first when add
// is set, and returns.
func store(e elem, x isa, mr, nv int, c, ldc Register, acc func(i, v int) VecPhysical, add bool) {
	for i := 0; i < mr; i++ {
		for v := 0; v < nv; v++ {
			m := Mem{Base: c, Disp: v * x.bytes}
			if add {
				e.add(m, acc(i, v), acc(i, v))
			}
			e.move(acc(i, v), m)
		}
		if i < mr-1 {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()
}

func shift(bytes int) int {
	if bytes == 8 {
		return 3
	}
	return 2
}

func main() {
	ConstraintExpr("amd64")
	// AVX-512: 32 vectors; 14 rows × 2 vectors = 28 accumulators, 2 for B, 1 broadcast.
	kernel(f32, avx512, 14, 2)
	kernel(f64, avx512, 14, 2)
	// Few rows (a convolution's 8 or 16 output channels): 8 rows × 2 vectors = 16 accumulators.
	kernel(f32, avx512, 8, 2)
	kernel(f64, avx512, 8, 2)
	// AVX2+FMA: 16 vectors; 6 rows × 2 vectors = 12 accumulators, 2 for B, 1 broadcast.
	kernel(f32, avx2, 6, 2)
	kernel(f64, avx2, 6, 2)
	// Few rows: 4 rows × 2 vectors = 8 accumulators.
	kernel(f32, avx2, 4, 2)
	kernel(f64, avx2, 4, 2)
	Generate()
}
