package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Comparison predicates of VCMPPS/VCMPPD.
const (
	cmpUnord = 0x03 // either operand NaN
	cmpOrd   = 0x07 // neither NaN
	cmpGtOQ  = 0x1e // greater, false on NaN
)

// maxPool emits the AVX-512 kernel of package vecops's MaxPool2: for each
// plane and each pair of rows, a chunk of lanes outputs at a time, the
// chunk's 2·lanes elements of each row deinterleaved into the windows'
// left and right columns (VPERMI2PS/PD), then the scalar code's tournament
// on whole vectors: the top pair's winner, the bottom pair's, then the
// bottom one where it wins against the top one, where v wins against u
// when v > u, or u is NaN and v is not. Values are blended, and their
// indices into x (int32 lanes) with them. The last chunk of a row is
// masked: inMask0 and inMask1 for the two input vectors, outMask for the
// outputs.
func maxPool(e elem) {
	lanes := 64 / e.bytes
	name := fmt.Sprintf("maxPool%dAVX512", e.bits)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x, y *%s, argmax *int32, planes, h, w, full int, inMask0, inMask1, outMask uint16)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is MaxPool2 for rows of full chunks of %d outputs and a masked one.", name, lanes))
	x, y, am := Load(Param("x"), RSI), Load(Param("y"), RDI), Load(Param("argmax"), RDX)
	planes, w := Load(Param("planes"), R8), Load(Param("w"), R9)
	for i, p := range []string{"inMask0", "inMask1", "outMask"} {
		r := Load(Param(p), RAX)
		KMOVW(r.(GPPhysical).As32(), []OpmaskPhysical{K5, K6, K7}[i])
	}
	even, odd := vec(64, 20), vec(64, 21)
	lane2, oneI, wI, r0I := vec(64, 24), vec(64, 25), vec(64, 26), vec(64, 27)
	// lane2 = {0, 2, 4, …} (int32): lane l's window starts 2l elements
	// after the chunk's; even and odd index the chunk's left and right
	// columns for the permutes; oneI = 1s; wI = w.
	MOVL(U32(1), EAX)
	VPBROADCASTD(EAX, oneI)
	VMOVDQU32(lane2Table(), lane2)
	if e.bits == 32 {
		VMOVDQU32(lane2, even)
		VPADDD(oneI, lane2, odd)
	} else {
		// VPERMT2PD indexes 64-bit lanes: even = {0, 2, …, 14}, odd = even+1.
		VPMOVZXDQ(lane2.AsY(), even)
		VPMOVZXDQ(lane2.AsY(), odd)
		MOVQ(U64(1), RAX)
		VPBROADCASTQ(RAX, vec(64, 28))
		VPADDQ(vec(64, 28), odd, odd)
	}
	VPBROADCASTD(w.(GPPhysical).As32(), wI)
	h := paramMem("h")
	full := paramMem("full")
	base, row, cnt, r1 := RBX, RCX, R10, R11
	XORQ(base, base) // index of the plane's first element
	TESTQ(planes, planes)
	JZ(LabelRef(name + "_done"))
	Label(name + "_plane")
	MOVQ(h, row)
	SHRQ(U8(1), row) // output rows
	MOVQ(base, R12)  // r0: index of the top row's first element
	JZ(LabelRef(name + "_nextplane"))
	Label(name + "_row")
	MOVQ(R12, R13) // index of this chunk's first window
	MOVQ(full, cnt)
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_tail"))
	Label(name + "_chunk")
	chunk(e, x, y, am, R13, w, r1, lanes, false, [6]VecPhysical{even, odd, lane2, oneI, wI, r0I})
	ADDQ(U32(2*lanes), R13)
	DECQ(cnt)
	JNZ(LabelRef(name + "_chunk"))
	Label(name + "_tail")
	KORTESTW(K7, K7)
	JZ(LabelRef(name + "_nextrow"))
	chunk(e, x, y, am, R13, w, r1, lanes, true, [6]VecPhysical{even, odd, lane2, oneI, wI, r0I})
	Label(name + "_nextrow")
	LEAQ(Mem{Base: R12, Index: w, Scale: 2}, R12)
	DECQ(row)
	JNZ(LabelRef(name + "_row"))
	Label(name + "_nextplane")
	MOVQ(w, RAX)
	IMULQ(h, RAX)
	ADDQ(RAX, base)
	DECQ(planes)
	JNZ(LabelRef(name + "_plane"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// chunk emits one chunk: the windows whose top-left elements are x[at],
// x[at+2], …; it writes the outputs at y and argmax and advances both.
func chunk(e elem, x, y, am, at, w, scratch Register, lanes int, masked bool, c [6]VecPhysical) {
	even, odd, lane2, oneI, wI, r0I := c[0], c[1], c[2], c[3], c[4], c[5]
	t0, t1, b0, b1 := vec(64, 0), vec(64, 1), vec(64, 2), vec(64, 3)
	a, b, cc, d := vec(64, 4), vec(64, 5), vec(64, 6), vec(64, 7)
	ti, bi := vec(64, 8), vec(64, 9)
	load := func(m Mem, k OpmaskPhysical, dst VecPhysical) {
		switch {
		case masked && e.bits == 32:
			VMOVUPS_Z(m, k, dst)
		case masked:
			VMOVUPD_Z(m, k, dst)
		default:
			e.move(m, dst)
		}
	}
	// top row at x + at·size, bottom row w elements further
	LEAQ(Mem{Base: x, Index: at, Scale: uint8(e.bytes)}, scratch)
	load(Mem{Base: scratch}, K5, t0)
	load(Mem{Base: scratch, Disp: 64}, K6, t1)
	LEAQ(Mem{Base: scratch, Index: w, Scale: uint8(e.bytes)}, scratch)
	load(Mem{Base: scratch}, K5, b0)
	load(Mem{Base: scratch, Disp: 64}, K6, b1)
	perm := func(idx, lo, hi, dst VecPhysical) {
		if e.bits == 32 {
			VMOVDQU32(idx, dst)
			VPERMI2PS(hi, lo, dst)
		} else {
			VMOVDQU64(idx, dst)
			VPERMI2PD(hi, lo, dst)
		}
	}
	perm(even, t0, t1, a)
	perm(odd, t0, t1, b)
	perm(even, b0, b1, cc)
	perm(odd, b0, b1, d)
	cmp := func(pred int, u, v VecPhysical, k OpmaskPhysical) { // k = v pred u
		if e.bits == 32 {
			VCMPPS(U8(pred), u, v, k)
		} else {
			VCMPPD(U8(pred), u, v, k)
		}
	}
	// wins(v, u) into k: v > u, or u NaN and v not.
	wins := func(v, u VecPhysical, k OpmaskPhysical) {
		cmp(cmpGtOQ, u, v, k)
		cmp(cmpUnord, u, u, K2)
		cmp(cmpOrd, v, v, K3)
		KANDW(K2, K3, K2)
		KORW(K2, k, k)
	}
	blend := func(k OpmaskPhysical, u, v, dst VecPhysical) { // dst = k ? v : u
		if e.bits == 32 {
			VBLENDMPS(v, u, k, dst)
		} else {
			VBLENDMPD(v, u, k, dst)
		}
	}
	// r0I = at + 2·lane: the top-left index of each window.
	VPBROADCASTD(at.(GPPhysical).As32(), r0I)
	VPADDD(lane2, r0I, r0I)
	wins(b, a, K1)
	blend(K1, a, b, a) // a: the top pair's winner
	VMOVDQA32(r0I, ti)
	VPADDD(oneI, ti, K1, ti)
	wins(d, cc, K4)
	blend(K4, cc, d, cc) // cc: the bottom pair's winner
	VPADDD(wI, r0I, bi)
	VPADDD(oneI, bi, K4, bi)
	wins(cc, a, K1)
	blend(K1, a, cc, a)
	VPBLENDMD(bi, ti, K1, ti)
	if masked {
		if e.bits == 32 {
			VMOVUPS(a, K7, Mem{Base: y})
		} else {
			VMOVUPD(a, K7, Mem{Base: y})
		}
		VMOVDQU32(ti, K7, Mem{Base: am})
		// the masked chunk is the row's last: advance by its outputs
		KMOVW(K7, scratch.(GPPhysical).As32())
		POPCNTL(scratch.(GPPhysical).As32(), scratch.(GPPhysical).As32())
		LEAQ(Mem{Base: y, Index: scratch, Scale: uint8(e.bytes)}, y)
		LEAQ(Mem{Base: am, Index: scratch, Scale: 4}, am)
		return
	}
	e.move(a, Mem{Base: y})
	if lanes == 16 {
		VMOVDQU32(ti, Mem{Base: am})
	} else {
		VMOVDQU(ti.AsY(), Mem{Base: am}) // 8 indices
	}
	ADDQ(U32(64), y)
	ADDQ(U32(4*lanes), am)
}

// lane2 is the constant {0, 2, 4, …, 30} as 16 int32s, emitted once by
// main before the kernels that read it.
var lane2 Mem

func lane2Table() Mem { return lane2 }

// emitLane2 emits lane2's data.
func emitLane2() {
	lane2 = GLOBL("poolLane2", RODATA|NOPTR)
	for l := 0; l < 16; l++ {
		DATA(4*l, U32(2*l))
	}
}
