package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// col2im emits the AVX-512 kernel of package vecops's Col2Im for one
// plane whose rows fit one vector (w ≤ lanes): for each row y of dx,
//
//	acc = +0
//	for i from max(0, y−oh+1) to min(kh−1, y):      (oy = y − i)
//	  for j from 0 to kw−1:
//	    acc[j+t] = acc[j+t] + dcol[(i·kw+j)·ld + oy·ow + t]   for t < ow
//	dx[y·w : y·w+w] = acc
//
// The shifted run is one masked addition from memory (lanes j … j+ow−1,
// the mask runMask shifted left j times; the address is the run's less j
// elements, and masked-off lanes are not read). Each element gets its
// terms in the scalar code's order, from +0, and each row of dx is
// written once: no store is read back.
func col2im(e elem) {
	name := fmt.Sprintf("col2im%dAVX512", e.bits)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(dx *%[1]s, dcol *%[1]s, ld, h, w, oh, ow, kh, kw int, rowMask, runMask uint16)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets one plane of dx (h rows of w ≤ lanes) to the col2im of dcol (rows ld apart).", name))
	dx, dcol := Load(Param("dx"), RDI), Load(Param("dcol"), RSI)
	ld := Load(Param("ld"), RDX)
	ow, kh, kw := Load(Param("ow"), R10), Load(Param("kh"), R11), Load(Param("kw"), R12)
	h, oh, w := paramMem("h"), paramMem("oh"), paramMem("w")
	rm := Load(Param("rowMask"), RAX)
	KMOVW(rm.(GPPhysical).As32(), K1)
	rn := Load(Param("runMask"), RAX)
	KMOVW(rn.(GPPhysical).As32(), K3)
	shift := U8(log2(e.bytes))
	y, i, iHi, p, j, t := RBX, RCX, R13, R8, R9, RAX
	acc := vec(64, 0)
	XORQ(y, y)
	Label(name + "_row")
	VPXORD(acc, acc, acc)
	// i from max(0, y−oh+1) to min(kh−1, y)
	MOVQ(y, i)
	SUBQ(oh, i)
	INCQ(i)
	XORQ(t, t)
	CMPQ(i, t)
	CMOVQLT(t, i)
	MOVQ(kh, iHi)
	DECQ(iHi)
	CMPQ(iHi, y)
	CMOVQGT(y, iHi)
	Label(name + "_i")
	CMPQ(i, iHi)
	JGT(LabelRef(name + "_store"))
	// p = dcol + (i·kw·ld + (y−i)·ow)·size
	MOVQ(i, p)
	IMULQ(kw, p)
	IMULQ(ld, p)
	MOVQ(y, t)
	SUBQ(i, t)
	IMULQ(ow, t)
	ADDQ(t, p)
	SHLQ(shift, p)
	ADDQ(dcol, p)
	KMOVW(K3, K2)
	MOVQ(kw, j)
	Label(name + "_j")
	if e.bits == 32 {
		VADDPS(Mem{Base: p}, acc, K2, acc)
	} else {
		VADDPD(Mem{Base: p}, acc, K2, acc)
	}
	KSHIFTLW(U8(1), K2, K2)
	// next run: ld elements on, one element back
	LEAQ(Mem{Base: p, Index: ld, Scale: uint8(e.bytes), Disp: -e.bytes}, p)
	DECQ(j)
	JNZ(LabelRef(name + "_j"))
	INCQ(i)
	JMP(LabelRef(name + "_i"))
	Label(name + "_store")
	MOVQ(y, t)
	IMULQ(w, t)
	if e.bits == 32 {
		VMOVUPS(acc, K1, Mem{Base: dx, Index: t, Scale: 4})
	} else {
		VMOVUPD(acc, K1, Mem{Base: dx, Index: t, Scale: 8})
	}
	INCQ(y)
	CMPQ(y, h)
	JLT(LabelRef(name + "_row"))
	VZEROUPPER()
	RET()
}

// paramMem is the stack slot of the parameter called name.
func paramMem(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}
