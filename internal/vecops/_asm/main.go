// Command asm generates the element-wise kernels of package vecops with avo.
//
//	cd internal/vecops/_asm && go run . -out ../kernels_amd64.s -stubs ../kernels_amd64.go -pkg vecops
//
// (`go generate ./internal/vecops` runs exactly that.) It is a module of its
// own so that avo is a dependency of the generator only, never of the
// library.
//
// Every kernel walks its slices one vector at a time and handles the first
// n - n%lanes elements only; the caller does the rest with the scalar code.
// The arithmetic is the scalar code's, operation by operation: one VMULPS,
// VADDPS, VDIVPS or VSQRTPS per Go operator, never a fused multiply-add (the
// scalar code converts every product to its type, which forbids Go to fuse
// it). Constants come as value parameters (a
// pointer would escape through the variant table's function values) and
// are broadcast once, before the loop.
//
// Operand order: when both operands of an addition or a multiplication are
// NaN, x86 returns the first source's NaN. The Go compiler makes one
// operand of each scalar SSE instruction its destination, which is that
// first source, and chooses which one per expression, not always the left
// one. The arithmetic helpers therefore take (first source, second source,
// destination), and each kernel below passes the operands in the order the
// compiler chose for the scalar code of package vecops (read off `go tool
// objdump`); the package's tests, which meet NaNs with different payloads
// in every operation, check that the order still holds.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// isa describes one instruction set's vectors.
type isa struct {
	name   string // suffix of the kernel's name
	bytes  int    // vector width in bytes
	avx512 bool   // gathers take a K mask (else a vector mask)
}

var (
	avx512 = isa{name: "AVX512", bytes: 64, avx512: true}
	avx2   = isa{name: "AVX2", bytes: 32}
)

// vec returns vector register i of the width w bytes.
func vec(w, i int) VecPhysical {
	switch w {
	case 64:
		return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
			Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
	case 32:
		return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
	}
	return []VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15}[i]
}

// elem describes one element type's instructions. The arithmetic helpers
// compute dst = a op b with a as the instruction's first source.
type elem struct {
	bits   int
	goType string
	bytes  int
	bcast  func(m, v Op)
	move   func(src, dst Op)
	mul    func(a, b, dst Op)
	add    func(a, b, dst Op)
	div    func(a, b, dst Op)
	sqrt   func(a, dst Op)
	gather func(x isa, mem Mem, mask, dst Op)
}

var (
	f32 = elem{bits: 32, goType: "float32", bytes: 4,
		bcast: func(m, v Op) { VBROADCASTSS(m, v) },
		move:  func(s, d Op) { VMOVUPS(s, d) },
		mul:   func(a, b, d Op) { VMULPS(b, a, d) },
		add:   func(a, b, d Op) { VADDPS(b, a, d) },
		div:   func(a, b, d Op) { VDIVPS(b, a, d) },
		sqrt:  func(a, d Op) { VSQRTPS(a, d) },
		gather: func(x isa, m Mem, k, d Op) {
			if x.avx512 {
				VGATHERDPS(m, k, d)
			} else {
				VGATHERDPS(k, m, d)
			}
		}}
	f64 = elem{bits: 64, goType: "float64", bytes: 8,
		bcast: func(m, v Op) { VBROADCASTSD(m, v) },
		move:  func(s, d Op) { VMOVUPD(s, d) },
		mul:   func(a, b, d Op) { VMULPD(b, a, d) },
		add:   func(a, b, d Op) { VADDPD(b, a, d) },
		div:   func(a, b, d Op) { VDIVPD(b, a, d) },
		sqrt:  func(a, d Op) { VSQRTPD(a, d) },
		gather: func(x isa, m Mem, k, d Op) {
			if x.avx512 {
				VGATHERDPD(m, k, d)
			} else {
				VGATHERDPD(k, m, d)
			}
		}}
)

// step is a pointer that the loop advances by a number of bytes.
type step struct {
	reg Register
	by  int
}

// loop emits the loop over n/lanes vectors: body once per vector, then
// every pointer of steps advanced; after it the kernel returns.
func loop(name string, n Register, lanes int, steps []step, body func()) {
	SHRQ(U8(log2(lanes)), n)
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

// broadcast loads the scalar parameters named into vector registers 0, 1, ….
func broadcast(e elem, x isa, names ...string) []VecPhysical {
	vs := make([]VecPhysical, len(names))
	for i, name := range names {
		vs[i] = vec(x.bytes, i)
		b, err := Param(name).Resolve()
		if err != nil {
			panic(err)
		}
		e.bcast(b.Addr, vs[i])
	}
	return vs
}

// sgdCase is one case of SGD's step, as package vecops's SGD type names
// them: Plain (momentum 0), First (the first step with momentum) or
// Momentum (every later one), with or without weight decay and Nesterov.
type sgdCase struct {
	kind            string
	decay, nesterov bool
}

func (c sgdCase) String() string {
	s := c.kind
	if c.decay {
		s += "Decay"
	}
	if c.nesterov {
		s += "Nesterov"
	}
	return s
}

// sgd emits one SGD kernel (wd: weight decay, mom: momentum, omd: one
// minus dampening). Per element, with T the element type:
//
//	gi := g[i]
//	if decay { gi += wd * p[i] }
//	Plain:    (nothing)
//	First:    buf[i] = gi; if nesterov { gi += mom * gi }
//	Momentum: b := buf[i]*mom + oneMinusDamp*gi; buf[i] = b
//	          if nesterov { gi += mom * b } else { gi = b }
//	p[i] += negLR * gi
func sgd(e elem, x isa, c sgdCase) {
	name := fmt.Sprintf("sgd%s%d%s", c, e.bits, x.name)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(p, grad, buf *%[1]s, n int, negLR, wd, mom, omd %[1]s)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is SGD's %s step on the first n - n%%%d elements.", name, c, x.bytes/e.bytes))
	p, g, buf := Load(Param("p"), RDI), Load(Param("grad"), RSI), Load(Param("buf"), RDX)
	n := Load(Param("n"), RCX)
	k := broadcast(e, x, "negLR", "wd", "mom", "omd")
	negLR, wd, mom, omd := k[0], k[1], k[2], k[3]
	gi, pi, t, b := vec(x.bytes, 4), vec(x.bytes, 5), vec(x.bytes, 6), vec(x.bytes, 7)
	steps := []step{{p, x.bytes}, {g, x.bytes}}
	if c.kind != "Plain" {
		steps = append(steps, step{buf, x.bytes})
	}
	loop(name, n, x.bytes/e.bytes, steps, func() {
		e.move(Mem{Base: g}, gi)
		e.move(Mem{Base: p}, pi)
		if c.decay {
			e.mul(pi, wd, t)
			e.add(gi, t, gi)
		}
		switch c.kind {
		case "First":
			e.move(gi, Mem{Base: buf})
			if c.nesterov {
				e.mul(gi, mom, t)
				e.add(gi, t, gi)
			}
		case "Momentum":
			e.move(Mem{Base: buf}, b)
			e.mul(b, mom, b)
			e.mul(gi, omd, t)
			e.add(b, t, b)
			e.move(b, Mem{Base: buf})
			if c.nesterov {
				e.mul(b, mom, t)
				e.add(t, gi, gi)
			} else {
				gi = b
			}
		}
		e.mul(gi, negLR, t)
		e.add(t, pi, pi)
		e.move(pi, Mem{Base: p})
	})
}

// Adam's weight decay: none, L2 (added to the gradient) or decoupled
// (AdamW: the parameter shrinks).
var adamCases = []string{"", "L2", "Decoupled"}

// adam emits one Adam kernel. Per element:
//
//	pi, gi := p[i], g[i]
//	Decoupled: pi *= decayMul     L2: gi += l2 * pi
//	mi := m[i]*b1 + omb1*gi
//	vi := v[i]*b2 + omb2*gi*gi
//	m[i], v[i] = mi, vi
//	denom := sqrt(vi)/bc2Sqrt + eps
//	p[i] = pi + negStep*(mi/denom)
func adam(e elem, x isa, decay string) {
	name := fmt.Sprintf("adam%s%d%s", decay, e.bits, x.name)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(p, grad, m, v *%[1]s, n int, negStep, bc2Sqrt, eps, b1, omb1, b2, omb2, decayMul, l2 %[1]s)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is Adam's step (weight decay: %q) on the first n - n%%%d elements.", name, decay, x.bytes/e.bytes))
	p, g := Load(Param("p"), RDI), Load(Param("grad"), RSI)
	m, v := Load(Param("m"), RDX), Load(Param("v"), RBX)
	n := Load(Param("n"), RCX)
	k := broadcast(e, x, "negStep", "bc2Sqrt", "eps", "b1", "omb1", "b2", "omb2", "decayMul", "l2")
	negStep, bc2Sqrt, eps, b1, omb1, b2, omb2, decayMul, l2 := k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]
	pi, gi, mi, vi, t := vec(x.bytes, 9), vec(x.bytes, 10), vec(x.bytes, 11), vec(x.bytes, 12), vec(x.bytes, 13)
	steps := []step{{p, x.bytes}, {g, x.bytes}, {m, x.bytes}, {v, x.bytes}}
	loop(name, n, x.bytes/e.bytes, steps, func() {
		e.move(Mem{Base: p}, pi)
		e.move(Mem{Base: g}, gi)
		switch decay {
		case "Decoupled":
			e.mul(pi, decayMul, pi)
		case "L2":
			e.mul(l2, pi, t)
			e.add(gi, t, gi)
		}
		e.move(Mem{Base: m}, mi)
		e.mul(mi, b1, mi)
		e.mul(omb1, gi, t)
		e.add(t, mi, mi)
		e.move(mi, Mem{Base: m})
		e.move(Mem{Base: v}, vi)
		e.mul(vi, b2, vi)
		e.mul(omb2, gi, t)
		e.mul(t, gi, t)
		e.add(t, vi, vi)
		e.move(vi, Mem{Base: v})
		e.sqrt(vi, t)
		e.div(t, bc2Sqrt, t)
		e.add(t, eps, t)
		e.div(mi, t, t)
		e.mul(t, negStep, t)
		e.add(t, pi, pi)
		e.move(pi, Mem{Base: p})
	})
}

// lut emits the table look-up dst[i] = table[src[i]]: the bytes of a vector
// widened to 32-bit indices (VPMOVZXBD), the elements gathered from the
// table (VGATHERDPS/VGATHERDPD), stored. The gather's destination is zeroed
// first so that no gather waits for the previous one.
func lut(e elem, x isa) {
	lanes := x.bytes / e.bytes
	name := fmt.Sprintf("lut%d%s", e.bits, x.name)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(dst *%[1]s, src *byte, n int, table *[256]%[1]s)", e.goType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets dst[i] = table[src[i]] for the first n - n%%%d elements.", name, lanes))
	dst, src := Load(Param("dst"), RDI), Load(Param("src"), RSI)
	n := Load(Param("n"), RCX)
	table := Load(Param("table"), RAX)
	idx, val, mask := vec(lanes*4, 0), vec(x.bytes, 1), vec(x.bytes, 2)
	loop(name, n, lanes, []step{{dst, x.bytes}, {src, lanes}}, func() {
		VPMOVZXBD(Mem{Base: src}, idx)
		var k Op = mask
		if x.avx512 {
			k = K1
			KXNORW(K1, K1, K1)
			VPXORD(val, val, val)
		} else {
			VPCMPEQD(mask, mask, mask)
			VXORPS(val, val, val)
		}
		e.gather(x, Mem{Base: table, Index: idx, Scale: uint8(e.bytes)}, k, val)
		e.move(val, Mem{Base: dst})
	})
}

// lutPermute emits the float32 table look-up for AVX-512 without gathers:
// the 1 KiB table lives in 16 vector registers, 32 entries per pair of
// them. VPERMI2PS picks, in every lane, entry index%32 of one pair, so 8
// permutes give each lane its 8 candidates, and three rounds of masked
// blends on bits 5, 6 and 7 of the index (VPTESTMD) keep the one the index
// names.
func lutPermute() {
	const name = "lut32AVX512"
	TEXT(name, NOSPLIT, "func(dst *float32, src *byte, n int, table *[256]float32)")
	Pragma("noescape")
	Doc(name + " sets dst[i] = table[src[i]] for the first n - n%16 elements.")
	dst, src := Load(Param("dst"), RDI), Load(Param("src"), RSI)
	n := Load(Param("n"), RCX)
	table := Load(Param("table"), RAX)
	tab := func(i int) VecPhysical { return vec(64, 16+i) }
	for i := 0; i < 16; i++ {
		VMOVUPS(Mem{Base: table, Disp: 64 * i}, tab(i))
	}
	idx := vec(64, 0)
	cand := func(i int) VecPhysical { return vec(64, 1+i) }
	bit := []VecPhysical{vec(64, 9), vec(64, 10), vec(64, 11)}
	masks := []OpmaskPhysical{K1, K2, K3}
	for b, v := range bit {
		MOVL(U32(32<<b), R8L)
		VPBROADCASTD(R8L, v)
	}
	loop(name, n, 16, []step{{dst, 64}, {src, 16}}, func() {
		VPMOVZXBD(Mem{Base: src}, idx)
		for b := range bit {
			VPTESTMD(bit[b], idx, masks[b])
		}
		for k := 0; k < 8; k++ {
			VMOVDQA32(idx, cand(k))
			VPERMI2PS(tab(2*k+1), tab(2*k), cand(k))
		}
		// Round r keeps, of candidates 2j·2^r and (2j+1)·2^r, the one bit
		// 5+r of the index names, in candidate 2j·2^r.
		for r, width := 0, 1; width < 8; r, width = r+1, width*2 {
			for j := 0; j < 8; j += 2 * width {
				VBLENDMPS(cand(j+width), cand(j), masks[r], cand(j))
			}
		}
		VMOVUPS(cand(0), Mem{Base: dst})
	})
}

func main() {
	ConstraintExpr("amd64")
	sgdCases := []sgdCase{{kind: "Plain"}, {kind: "Plain", decay: true}}
	for _, kind := range []string{"First", "Momentum"} {
		for _, decay := range []bool{false, true} {
			for _, nesterov := range []bool{false, true} {
				sgdCases = append(sgdCases, sgdCase{kind, decay, nesterov})
			}
		}
	}
	for _, x := range []isa{avx512, avx2} {
		for _, e := range []elem{f32, f64} {
			for _, c := range sgdCases {
				sgd(e, x, c)
			}
			for _, d := range adamCases {
				adam(e, x, d)
			}
			if x.avx512 && e.bits == 32 {
				lutPermute()
			} else {
				lut(e, x)
			}
		}
	}
	emitLane2()
	emitInterleave()
	for _, e := range []elem{f32, f64} {
		block(e, false)
		block(e, true)
		rectifier(e, false)
		rectifier(e, true)
		col2im(e)
		maxPool(e)
		maxPoolGrad(e)
	}
	Generate()
}
