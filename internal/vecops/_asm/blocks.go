package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// block emits the AVX-512 kernel that copies (add false) or adds (add
// true) outer blocks of rows runs of width elements: for o < outer and
// r < rows, with d = o·dso + r·ds and s = o·sso + r·ss,
//
//	dst[d + t] = src[s + t]              (copy)
//	dst[d + t] = dst[d + t] + src[s + t]  (add, dst the first source)
//
// for t < full·lanes with whole vectors, and for the next lanes elements
// where the bits of mask say so (masked loads and stores: elements past
// the mask are neither read nor written, so a run may end at the end of
// its slice). The runs go in order of o, then r. The strides are in
// elements; the kernel takes dso − rows·ds and sso − rows·ss for dso and
// sso, and outer and rows of 1 at least.
func block(e elem, add bool) {
	kind, verb := "copy", "copies"
	if add {
		kind, verb = "add", "adds"
	}
	name := fmt.Sprintf("%sBlock%dAVX512", kind, e.bits)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(dst *%[1]s, ds, dso int, src *%[1]s, ss, sso int, outer, rows, full int, mask uint16)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s %s outer blocks (strides dso, sso) of rows runs (strides ds, ss) of full whole vectors and a masked one from src to dst.", name, verb))
	dst, ds := Load(Param("dst"), RDI), Load(Param("ds"), RDX)
	src, ss := Load(Param("src"), RSI), Load(Param("ss"), R8)
	full := Load(Param("full"), R9)
	m := Load(Param("mask"), R10)
	KMOVW(m.(GPPhysical).As32(), K1)
	// dso and sso come less rows·ds and rows·ss: what moves the pointers
	// from the end of one block to the start of the next.
	dso, sso, outer := Load(Param("dso"), R10), Load(Param("sso"), RAX), Load(Param("outer"), RBX)
	shift := U8(log2(e.bytes))
	for _, r := range []Register{ds, ss, dso, sso} {
		SHLQ(shift, r)
	}
	rows, p, q, i := RCX, R11, R12, R13
	v, w := vec(64, 0), vec(64, 1)
	masked := func(mv func(Op, Op, Op), m Mem, d Op) { mv(m, K1, d) }
	moveZ := func(s, k, d Op) { VMOVUPS_Z(s, k, d) }
	if e.bits == 64 {
		moveZ = func(s, k, d Op) { VMOVUPD_Z(s, k, d) }
	}
	store := func(s, k, d Op) { VMOVUPS(s, k, d) }
	if e.bits == 64 {
		store = func(s, k, d Op) { VMOVUPD(s, k, d) }
	}
	// The caller passes outer and rows of 1 at least.
	Label(name + "_outer")
	Load(Param("rows"), rows)
	Label(name + "_row")
	MOVQ(src, p)
	MOVQ(dst, q)
	MOVQ(full, i)
	TESTQ(i, i)
	JZ(LabelRef(name + "_tail"))
	Label(name + "_vec")
	e.move(Mem{Base: p}, v)
	if add {
		e.move(Mem{Base: q}, w)
		e.add(w, v, v)
	}
	e.move(v, Mem{Base: q})
	ADDQ(U8(64), p)
	ADDQ(U8(64), q)
	DECQ(i)
	JNZ(LabelRef(name + "_vec"))
	Label(name + "_tail")
	masked(moveZ, Mem{Base: p}, v)
	if add {
		masked(moveZ, Mem{Base: q}, w)
		e.add(w, v, v)
	}
	store(v, K1, Mem{Base: q})
	ADDQ(ss, src)
	ADDQ(ds, dst)
	DECQ(rows)
	JNZ(LabelRef(name + "_row"))
	ADDQ(dso, dst)
	ADDQ(sso, src)
	DECQ(outer)
	JNZ(LabelRef(name + "_outer"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// rectifier emits the AVX-512 kernel of package models's ReLU (grad
// false: out = x·(x ≥ 0)) or of its gradient (grad true: out = dy·(x ≥
// 0)) on the first n - n%lanes elements: the comparison x ≥ 0 (ordered,
// so NaN gives false) selects 1 or 0, and one multiplication per element
// gives the scalar code's bits (a product by 1 or 0 has one NaN operand
// at most, so the operand order cannot matter).
func rectifier(e elem, grad bool) {
	lanes := 64 / e.bytes
	name := fmt.Sprintf("relu%dAVX512", e.bits)
	sig := fmt.Sprintf("func(out, x *%s, n int)", e.goType)
	if grad {
		name = fmt.Sprintf("reluGrad%dAVX512", e.bits)
		sig = fmt.Sprintf("func(out, x, dy *%s, n int)", e.goType)
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is ReLU's %s on the first n - n%%%d elements.", name, map[bool]string{false: "forward pass", true: "gradient"}[grad], lanes))
	out, x := Load(Param("out"), RDI), Load(Param("x"), RSI)
	var dy Register
	steps := []step{{out, 64}, {x, 64}}
	if grad {
		dy = Load(Param("dy"), RDX)
		steps = append(steps, step{dy, 64})
	}
	n := Load(Param("n"), RCX)
	zero, one, v, sel, f := vec(64, 0), vec(64, 1), vec(64, 2), vec(64, 3), vec(64, 4)
	VPXORD(zero, zero, zero)
	if e.bits == 32 {
		MOVL(U32(0x3f800000), EAX)
		VPBROADCASTD(EAX, one)
	} else {
		MOVQ(U64(0x3ff0000000000000), RAX)
		VPBROADCASTQ(RAX, one)
	}
	const geOQ = 0x1d
	loop(name, n, lanes, steps, func() {
		e.move(Mem{Base: x}, v)
		if e.bits == 32 {
			VCMPPS(U8(geOQ), zero, v, K1)
			VMOVAPS_Z(one, K1, sel)
		} else {
			VCMPPD(U8(geOQ), zero, v, K1)
			VMOVAPD_Z(one, K1, sel)
		}
		if grad {
			e.move(Mem{Base: dy}, f)
			e.mul(f, sel, v)
		} else {
			e.mul(v, sel, v)
		}
		e.move(v, Mem{Base: out})
	})
}
