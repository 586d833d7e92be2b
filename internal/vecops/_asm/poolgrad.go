package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// interleave tables: for float32, lo = {0, 16, 1, 17, …, 7, 23} and hi =
// {8, 24, …, 15, 31} (int32 indices into the pair of vectors a, b: a[0],
// b[0], a[1], b[1], …); for float64 the same with 8 int64 lanes.
var interleave32, interleave64 [2]Mem

// emitInterleave emits the interleave tables' data.
func emitInterleave() {
	for h, name := range []string{"poolIlv32Lo", "poolIlv32Hi"} {
		interleave32[h] = GLOBL(name, RODATA|NOPTR)
		for l := 0; l < 16; l++ {
			DATA(4*l, U32(8*h+l/2+16*(l%2)))
		}
	}
	for h, name := range []string{"poolIlv64Lo", "poolIlv64Hi"} {
		interleave64[h] = GLOBL(name, RODATA|NOPTR)
		for l := 0; l < 8; l++ {
			DATA(8*l, U64(uint64(4*h+l/2+8*(l%2))))
		}
	}
}

// maxPoolGrad emits the AVX-512 kernel of MaxPool2Grad: for each chunk of
// lanes windows (as maxPool walks them), each window's four elements of dx
// get dy where the window's argmax points and 0 elsewhere: the argmax
// less the window's top-left index is compared with 0, 1, w and w+1,
// dy is kept under each mask, and the four results are interleaved into
// the two rows' 2·lanes elements and stored (masked in a row's last,
// short chunk). Every element of a window is written; the caller clears
// the elements in no window (an odd last row or column).
func maxPoolGrad(e elem) {
	lanes := 64 / e.bytes
	name := fmt.Sprintf("maxPoolGrad%dAVX512", e.bits)
	r := poolHead(e, name, "dy", "dx", "MaxPool2Grad for rows of full chunks of %d windows and a masked one")
	dy, dx, am, planes, w := r.in, r.out, r.argmax, r.planes, r.w
	lane2, oneI, wI, w1I := r.lane2, r.oneI, r.wI, vec(64, 28)
	ilvLo, ilvHi := vec(64, 20), vec(64, 21)
	VPADDD(oneI, wI, w1I)
	if e.bits == 32 {
		VMOVDQU32(interleave32[0], ilvLo)
		VMOVDQU32(interleave32[1], ilvHi)
	} else {
		VMOVDQU64(interleave64[0], ilvLo)
		VMOVDQU64(interleave64[1], ilvHi)
	}
	windows(name, lanes, planes, w, func(masked bool) {
		gradChunk(e, dy, dx, am, R13, w, R11, lanes, masked, [6]VecPhysical{lane2, oneI, wI, w1I, ilvLo, ilvHi})
	})
}

// gradChunk emits one chunk of maxPoolGrad: the windows whose top-left
// elements are dx[at], dx[at+2], …; it advances dy and argmax.
func gradChunk(e elem, dy, dx, am, at, w, scratch Register, lanes int, masked bool, c [6]VecPhysical) {
	lane2, oneI, wI, w1I, ilvLo, ilvHi := c[0], c[1], c[2], c[3], c[4], c[5]
	g, idx, diff := vec(64, 0), vec(64, 1), vec(64, 2)
	parts := []VecPhysical{vec(64, 3), vec(64, 4), vec(64, 5), vec(64, 6)} // tl, tr, bl, br
	outs := []VecPhysical{vec(64, 7), vec(64, 8), vec(64, 9), vec(64, 10)}
	// dy and argmax of the chunk's windows (masked off: 0)
	moveMasked(e, masked, Mem{Base: dy}, g, K7)
	if masked {
		VMOVDQU32_Z(Mem{Base: am}, K7, idx)
	} else if lanes == 16 {
		VMOVDQU32(Mem{Base: am}, idx)
	} else {
		VMOVDQU(Mem{Base: am}, idx.AsY())
	}
	// diff = argmax − (at + 2·lane)
	VPBROADCASTD(at.(GPPhysical).As32(), diff)
	VPADDD(lane2, diff, diff)
	VPSUBD(diff, idx, diff)
	VPXORD(idx, idx, idx)
	for i, off := range []VecPhysical{idx, oneI, wI, w1I} {
		VPCMPEQD(off, diff, K1)
		if e.bits == 32 {
			VMOVAPS_Z(g, K1, parts[i])
		} else {
			VMOVAPD_Z(g, K1, parts[i])
		}
	}
	for r := 0; r < 2; r++ { // top row, bottom row
		for hh, ilv := range []VecPhysical{ilvLo, ilvHi} {
			o := outs[2*r+hh]
			if e.bits == 32 {
				VMOVDQU32(ilv, o)
				VPERMI2PS(parts[2*r+1], parts[2*r], o)
			} else {
				VMOVDQU64(ilv, o)
				VPERMI2PD(parts[2*r+1], parts[2*r], o)
			}
		}
	}
	LEAQ(Mem{Base: dx, Index: at, Scale: uint8(e.bytes)}, scratch)
	store := func(v VecPhysical, m Mem, k OpmaskPhysical) { moveMasked(e, masked, v, m, k) }
	store(outs[0], Mem{Base: scratch}, K5)
	store(outs[1], Mem{Base: scratch, Disp: 64}, K6)
	LEAQ(Mem{Base: scratch, Index: w, Scale: uint8(e.bytes)}, scratch)
	store(outs[2], Mem{Base: scratch}, K5)
	store(outs[3], Mem{Base: scratch, Disp: 64}, K6)
	advance(e, masked, dy, am, scratch, lanes)
}
