package allreduce

import (
	"unsafe"

	"github.com/ringddp/ringddp/internal/half16"
	"github.com/ringddp/ringddp/numeric"
)

// The 16-bit floating-point types' arithmetic (Float16, BFloat16), as NCCL
// defines it for half and bfloat16: each combine step widens both operands
// to float32 (exactly), applies the operator in float32 exactly as the
// Float32 dtype does (combineElems: one IEEE float32 add, multiply or
// comparison; Max and Min propagate NaN), and rounds the float32 result
// once to the 16-bit type, to nearest with ties to even. Avg sums so, step
// by step, and its final division is one more such step: the float32
// quotient of the widened sum by the group size, rounded once.
//
// Special values follow from that: ±0, ±Inf and subnormals (of either
// type; none flushes to zero) combine as their float32 values do; a sum or
// product past the 16-bit range rounds to ±Inf (for Float16, at 65520 and
// above); Inf − Inf is NaN. A NaN that a combine step produces or passes
// on comes out as the canonical quiet NaN of the type (Float16 0x7e00,
// BFloat16 0x7fc0: positive, payload zero), as CUDA's 16-bit arithmetic
// returns its canonical NaN. So no result depends on the operand order of
// a NaN or on which CPU computed it, and every rank holds the same bits. A
// NaN no step touches (Broadcast, AllGather, a group of one rank) is moved
// bit for bit, payload and sign included.

// The canonical quiet NaNs of the 16-bit types.
const (
	canonicalNaN16  numeric.Float16  = 0x7e00
	canonicalNaNB16 numeric.BFloat16 = 0x7fc0
)

// block16 is how many elements combine16 widens at a time: two float32
// blocks of it live on the stack.
const block16 = 256

// The vector kernels of internal/half16 do the leading whole vectors of
// every combine and division in one pass each (widen, one float32
// operation, canonical NaN, round: the definition above, bit for bit); the
// scalar code below does the rest, and everything where no kernel runs.

// halfOp is op's float32 operation in internal/half16: Avg sums, as it
// does in float32.
func halfOp(op ReduceOp) half16.Op {
	switch op {
	case Prod:
		return half16.Mul
	case Max:
		return half16.Max
	case Min:
		return half16.Min
	}
	return half16.Add
}

// halfFormat is H's format in internal/half16.
func halfFormat[H numeric.Float16 | numeric.BFloat16]() half16.Format {
	var h H
	if _, ok := any(h).(numeric.Float16); ok {
		return half16.Float16
	}
	return half16.BFloat16
}

// halfBits is s as its bits: the same memory, as []uint16.
func halfBits[H numeric.Float16 | numeric.BFloat16](s []H) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// combine16 is combineElems for a 16-bit type H: the kernel's whole
// vectors, then each block of the rest of a and b widened into float32
// blocks, combined by the float32 kernel and narrowed into out. out may
// alias a or b exactly.
func combine16[H numeric.Float16 | numeric.BFloat16](op ReduceOp, out, a, b []H, widen func([]float32, []H), narrow func([]H, []float32)) {
	a, b = a[:len(out)], b[:len(out)]
	v := half16.Default()
	done := half16.Combine(&v, halfFormat[H](), halfOp(op), halfBits(out), halfBits(a), halfBits(b))
	out, a, b = out[done:], a[done:], b[done:]
	var fa, fb [block16]float32
	for lo := 0; lo < len(out); lo += block16 {
		hi := min(lo+block16, len(out))
		x, y := fa[:hi-lo], fb[:hi-lo]
		widen(x, a[lo:hi])
		widen(y, b[lo:hi])
		combineElems(op, x, x, y)
		narrow(out[lo:hi], x)
	}
}

// divide16 divides every element of s by n, as one combine step.
func divide16[H numeric.Float16 | numeric.BFloat16](s []H, n int, widen func([]float32, []H), narrow func([]H, []float32)) {
	v := half16.Default()
	s = s[half16.Divide(&v, halfFormat[H](), halfBits(s), float32(n)):]
	var f [block16]float32
	for lo := 0; lo < len(s); lo += block16 {
		hi := min(lo+block16, len(s))
		x := f[:hi-lo]
		widen(x, s[lo:hi])
		divideElems(x, float32(n))
		narrow(s[lo:hi], x)
	}
}

// widenFloat16 and widenBFloat16 widen src into dst (same length) with
// the scalar functions: the tails' and the go variant's widening, which
// need not ask for a variant again at every block (numeric's slice
// converters do).
func widenFloat16(dst []float32, src []numeric.Float16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = h.Float32()
	}
}

func widenBFloat16(dst []float32, src []numeric.BFloat16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = h.Float32()
	}
}

// narrowFloat16 rounds src into dst (same length), every NaN to the
// canonical one.
func narrowFloat16(dst []numeric.Float16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		if f != f {
			dst[i] = canonicalNaN16
		} else {
			dst[i] = numeric.Float16FromFloat32(f)
		}
	}
}

// narrowBFloat16 rounds src into dst (same length), every NaN to the
// canonical one.
func narrowBFloat16(dst []numeric.BFloat16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		if f != f {
			dst[i] = canonicalNaNB16
		} else {
			dst[i] = numeric.BFloat16FromFloat32(f)
		}
	}
}
