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
	r := poolHead(e, name, "x", "y", "MaxPool2 for rows of full chunks of %d outputs and a masked one")
	x, y, am, planes, w := r.in, r.out, r.argmax, r.planes, r.w
	even, odd := vec(64, 20), vec(64, 21)
	lane2, oneI, wI, r0I := r.lane2, r.oneI, r.wI, vec(64, 27)
	// even and odd index the chunk's left and right columns for the
	// permutes.
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
	windows(name, lanes, planes, w, func(masked bool) {
		chunk(e, x, y, am, R13, w, R11, lanes, masked, [6]VecPhysical{even, odd, lane2, oneI, wI, r0I})
	})
}

// poolRegs are the registers a pooling kernel's prologue loads: its two
// element pointers (the input and the output, or dy and dx), argmax,
// planes and w; and the vectors lane2 = {0, 2, 4, …} (int32: lane l's
// window starts 2l elements after the chunk's), oneI (1s) and wI (w).
type poolRegs struct {
	in, out, argmax, planes, w Register
	lane2, oneI, wI            VecPhysical
}

// poolHead emits a pooling kernel's header (its parameters in, out,
// argmax, planes, h, w, full and the three masks, which it loads into
// K5, K6 and K7) and the prologue of poolRegs. doc completes "name is".
func poolHead(e elem, name, in, out, doc string) poolRegs {
	TEXT(name, NOSPLIT, fmt.Sprintf("func(%s, %s *%s, argmax *int32, planes, h, w, full int, inMask0, inMask1, outMask uint16)", in, out, e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is "+doc+".", name, 64/e.bytes))
	r := poolRegs{in: Load(Param(in), RSI), out: Load(Param(out), RDI), argmax: Load(Param("argmax"), RDX),
		planes: Load(Param("planes"), R8), w: Load(Param("w"), R9),
		lane2: vec(64, 24), oneI: vec(64, 25), wI: vec(64, 26)}
	for i, p := range []string{"inMask0", "inMask1", "outMask"} {
		m := Load(Param(p), RAX)
		KMOVW(m.(GPPhysical).As32(), []OpmaskPhysical{K5, K6, K7}[i])
	}
	MOVL(U32(1), EAX)
	VPBROADCASTD(EAX, r.oneI)
	VMOVDQU32(lane2Table(), r.lane2)
	VPBROADCASTD(r.w.(GPPhysical).As32(), r.wI)
	return r
}

// windows emits the loops of the pooling kernels over planes, pairs of
// rows and chunks of lanes windows, and returns: body(false) for each
// whole chunk and body(true) for a row's last, short one (when the mask
// K7 has bits), with R13 the index of the chunk's first window's
// top-left element. The kernels' parameters h and full are read from
// the stack; RBX, RCX, R10 and R12 are the loops' own.
func windows(name string, lanes int, planes, w Register, body func(masked bool)) {
	h, full := paramMem("h"), paramMem("full")
	base, row, cnt := RBX, RCX, R10
	XORQ(base, base) // index of the plane's first element
	TESTQ(planes, planes)
	JZ(LabelRef(name + "_done"))
	Label(name + "_plane")
	MOVQ(h, row)
	SHRQ(U8(1), row) // output rows
	MOVQ(base, R12)  // index of the top row's first element
	JZ(LabelRef(name + "_nextplane"))
	Label(name + "_row")
	MOVQ(R12, R13)
	MOVQ(full, cnt)
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_tail"))
	Label(name + "_chunk")
	body(false)
	ADDQ(U32(2*lanes), R13)
	DECQ(cnt)
	JNZ(LabelRef(name + "_chunk"))
	Label(name + "_tail")
	KORTESTW(K7, K7)
	JZ(LabelRef(name + "_nextrow"))
	body(true)
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
	load := func(m Mem, k OpmaskPhysical, dst VecPhysical) { moveMasked(e, masked, m, dst, k) }
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
	moveMasked(e, masked, a, Mem{Base: y}, K7)
	switch {
	case masked:
		VMOVDQU32(ti, K7, Mem{Base: am})
	case lanes == 16:
		VMOVDQU32(ti, Mem{Base: am})
	default:
		VMOVDQU(ti.AsY(), Mem{Base: am}) // 8 indices
	}
	advance(e, masked, y, am, scratch, lanes)
}

// moveMasked moves one vector of e's elements from src to dst, under the
// mask k when masked (a load then zeroes the lanes k leaves out).
func moveMasked(e elem, masked bool, src, dst Op, k OpmaskPhysical) {
	_, load := src.(Mem)
	switch {
	case !masked:
		e.move(src, dst)
	case load && e.bits == 32:
		VMOVUPS_Z(src, k, dst)
	case load:
		VMOVUPD_Z(src, k, dst)
	case e.bits == 32:
		VMOVUPS(src, k, dst)
	default:
		VMOVUPD(src, k, dst)
	}
}

// advance moves the element pointer p and the argmax pointer am past a
// chunk: lanes windows, or for the masked chunk (a row's last) as many as
// K7 has bits.
func advance(e elem, masked bool, p, am, scratch Register, lanes int) {
	if masked {
		KMOVW(K7, scratch.(GPPhysical).As32())
		POPCNTL(scratch.(GPPhysical).As32(), scratch.(GPPhysical).As32())
		LEAQ(Mem{Base: p, Index: scratch, Scale: uint8(e.bytes)}, p)
		LEAQ(Mem{Base: am, Index: scratch, Scale: 4}, am)
		return
	}
	ADDQ(U32(64), p)
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
