package allreduce_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/half16"
	"github.com/ringddp/ringddp/numeric"
)

// halfCodec is one 16-bit type for the combine tests: its DType, its
// conversions (package numeric's, tested on their own), its canonical NaN
// and values whose combinations exercise its rounding and specials.
type halfCodec struct {
	dt       allreduce.DType
	toF32    func(uint16) float32
	fromF32  func(float32) uint16
	nan      uint16
	specials []uint16
	mant     int // mantissa bits
	bias     int // exponent bias
}

var halfCodecs = []halfCodec{
	{allreduce.Float16,
		func(h uint16) float32 { return numeric.Float16(h).Float32() },
		func(f float32) uint16 { return uint16(numeric.Float16FromFloat32(f)) },
		0x7e00,
		[]uint16{0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0x7d00, 0xff45, // ±0, ±Inf, NaNs
			0x0001, 0x8001, 0x03ff, 0x0400, // subnormals, the smallest normal
			0x7bff, 0xfbff, 0x4c00, // ±65504 (sums overflow), 16 (65504+16 = 65520 rounds to Inf)
			0x3c00, 0x1000, 0x1400, 0x6800, 0x3c01, // 1, 2^-11 (a tie with 1), 2^-10, 2048 (2048+1 a tie)
			0x5bff, 0x2400, 0xbc00}, // 255.9, 2^-6, -1
		10, 15},
	{allreduce.BFloat16,
		func(h uint16) float32 { return numeric.BFloat16(h).Float32() },
		func(f float32) uint16 { return uint16(numeric.BFloat16FromFloat32(f)) },
		0x7fc0,
		[]uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0x7fa0, 0xffd3,
			0x0001, 0x8001, 0x007f, 0x0080,
			0x7f7f, 0xff7f, 0x7f00,
			0x3f80, 0x3b80, 0x3c00, 0x4380, 0x3f81, // 1, 2^-8 (a tie with 1), 2^-7, 256 (256+1 a tie)
			0x437f, 0x3c80, 0xbf80},
		7, 127},
}

// want is one combine step by its definition, computed in float64: widen,
// apply op, round to float32 (a float64 sum or product of two float32
// values rounds to the float32 one: 53 ≥ 2·24+2 bits), round to 16 bits, a
// NaN to the canonical one.
func (c halfCodec) want(op allreduce.ReduceOp, a, b uint16) uint16 {
	x, y := float64(c.toF32(a)), float64(c.toF32(b))
	var r float64
	switch op {
	case allreduce.Sum:
		r = x + y
	case allreduce.Prod:
		r = x * y
	case allreduce.Max, allreduce.Min:
		// The first operand unless the second is NaN or beyond it.
		r = x
		if math.IsNaN(y) || op == allreduce.Max && y > x || op == allreduce.Min && y < x {
			r = y
		}
	}
	if math.IsNaN(r) {
		return c.nan
	}
	return c.fromF32(float32(r))
}

func halfBytes(s []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

// TestCombine16 checks the 16-bit combine kernel against its definition
// on every pair of the special values (ties, overflow to Inf, Inf − Inf,
// subnormals, NaN payloads) and on random bit patterns, at lengths below
// and above the vector kernels' threshold and the widening block, with
// the output aliasing an input, in every variant of internal/half16's
// kernels this CPU runs (the go one is the scalar code alone).
func TestCombine16(t *testing.T) {
	eachHalfVariant(t, testCombine16)
}

// eachHalfVariant runs test once per variant of internal/half16 this CPU
// runs, that variant forced.
func eachHalfVariant(t *testing.T, test func(*testing.T)) {
	for _, v := range half16.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			t.Setenv(half16.VariantEnv, v.Name)
			test(t)
		})
	}
}

func testCombine16(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 35))
	for _, c := range halfCodecs {
		var a, b []uint16
		for _, x := range c.specials {
			for _, y := range c.specials {
				a, b = append(a, x), append(b, y)
			}
		}
		for range 3000 {
			a, b = append(a, uint16(rng.Uint32())), append(b, uint16(rng.Uint32()))
		}
		for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Prod, allreduce.Max, allreduce.Min} {
			for _, n := range []int{1, 15, 16, 257, len(a)} {
				out := make([]uint16, n)
				if err := allreduce.Combine(c.dt, op, halfBytes(out), halfBytes(a[:n]), halfBytes(b[:n])); err != nil {
					t.Fatal(err)
				}
				aliased := slices.Clone(a[:n])
				if err := allreduce.Combine(c.dt, op, halfBytes(aliased), halfBytes(aliased), halfBytes(b[:n])); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					stepOp := op
					if op == allreduce.Avg {
						stepOp = allreduce.Sum // Avg's steps sum
					}
					w := c.want(stepOp, a[i], b[i])
					if out[i] != w || aliased[i] != w {
						t.Fatalf("%v %v of %#04x (%g) and %#04x (%g), %d elements: got %#04x (aliased %#04x), want %#04x (%g)",
							c.dt, op, a[i], c.toF32(a[i]), b[i], c.toF32(b[i]), n, out[i], aliased[i], w, c.toF32(w))
					}
				}
			}
		}
	}
}

// TestAvg16OneRankAndTwo: Avg's division is a step of its own (rounded
// once, NaN canonical); a group of one rank combines nothing, so Sum and
// Avg there leave the input's bits alone, NaN payloads included. Every
// variant of internal/half16's kernels.
func TestAvg16OneRankAndTwo(t *testing.T) {
	eachHalfVariant(t, testAvg16)
}

func testAvg16(t *testing.T) {
	for _, c := range halfCodecs {
		in := slices.Clone(c.specials)
		for _, n := range []int{3} {
			bufs := runRanks16(t, n, c.dt, in, allreduce.Avg)
			for i, x := range in {
				sum := x
				for range n - 1 {
					sum = c.want(allreduce.Sum, sum, x)
				}
				w := c.fromF32(c.toF32(sum) / float32(n))
				if f := c.toF32(sum) / float32(n); f != f {
					w = c.nan
				}
				for r, buf := range bufs {
					if buf[i] != w {
						t.Errorf("%v Avg on %d ranks of %#04x: rank %d got %#04x, want %#04x", c.dt, n, x, r, buf[i], w)
					}
				}
			}
		}
		for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg} {
			if got := runRanks16(t, 1, c.dt, in, op)[0]; !slices.Equal(got, in) {
				t.Errorf("%v %v on one rank changed its input: %x, want %x", c.dt, op, got, in)
			}
		}
	}
}

// runRanks16 is AllReduce with op of in (every rank's input) on n
// in-process ranks, as dt; it returns every rank's result.
func runRanks16(t *testing.T, n int, dt allreduce.DType, in []uint16, op allreduce.ReduceOp) [][]uint16 {
	t.Helper()
	inputs := make([][]uint16, n)
	for r := range inputs {
		inputs[r] = in
	}
	return runCollective16(t, n, dt, inputs, func(ctx context.Context, g *allreduce.Group, buf []uint16) error {
		return allReduce16(ctx, g, dt, buf, op)
	})
}

// as16 views the bits of b as H.
func as16[H numeric.Float16 | numeric.BFloat16](b []uint16) []H {
	return unsafe.Slice((*H)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
}

// allReduce16, reduce16 and reduceScatter16 are the collectives on the
// bits of their buffers as the 16-bit type dt.
func allReduce16(ctx context.Context, g *allreduce.Group, dt allreduce.DType, buf []uint16, op allreduce.ReduceOp) error {
	if dt == allreduce.Float16 {
		return allreduce.AllReduce(ctx, g, as16[numeric.Float16](buf), op)
	}
	return allreduce.AllReduce(ctx, g, as16[numeric.BFloat16](buf), op)
}

func reduce16(ctx context.Context, g *allreduce.Group, dt allreduce.DType, buf []uint16, op allreduce.ReduceOp, root int) error {
	if dt == allreduce.Float16 {
		return allreduce.Reduce(ctx, g, as16[numeric.Float16](buf), op, root)
	}
	return allreduce.Reduce(ctx, g, as16[numeric.BFloat16](buf), op, root)
}

func reduceScatter16(ctx context.Context, g *allreduce.Group, dt allreduce.DType, dst, src []uint16, op allreduce.ReduceOp) error {
	if dt == allreduce.Float16 {
		return allreduce.ReduceScatter(ctx, g, as16[numeric.Float16](dst), as16[numeric.Float16](src), op)
	}
	return allreduce.ReduceScatter(ctx, g, as16[numeric.BFloat16](dst), as16[numeric.BFloat16](src), op)
}

// runCollective16 runs fn on a copy of inputs[r] on every rank r of a fresh
// in-process world of n ranks (nodes of 2), with opts, and returns the
// copies.
func runCollective16(t *testing.T, n int, dt allreduce.DType, inputs [][]uint16, fn func(context.Context, *allreduce.Group, []uint16) error, opts ...allreduce.GroupOption) [][]uint16 {
	t.Helper()
	conns, _, err := allreducetest.InprocConns(n, 20*time.Second, inproc.WithLocalSize(2))
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]uint16, n)
	for r := range out {
		out[r] = slices.Clone(inputs[r])
	}
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return fn(ctx, g, out[g.Rank()])
	}, opts...)
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatalf("%v on %d ranks: %v", dt, n, err)
	}
	return out
}

// BenchmarkCombine16 times the 16-bit Sum kernel on 64 Ki elements, next
// to float32's, for docs/precision.md.
func BenchmarkCombine16(b *testing.B) {
	const n = 1 << 16
	for _, dt := range []allreduce.DType{allreduce.Float16, allreduce.BFloat16, allreduce.Float32} {
		buf := make([]byte, 3*n*dt.Size())
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < len(buf); i += dt.Size() {
			f := float32(rng.NormFloat64()) // gradient-like values
			switch dt {
			case allreduce.Float16:
				*(*numeric.Float16)(unsafe.Pointer(&buf[i])) = numeric.Float16FromFloat32(f)
			case allreduce.BFloat16:
				*(*numeric.BFloat16)(unsafe.Pointer(&buf[i])) = numeric.BFloat16FromFloat32(f)
			default:
				*(*float32)(unsafe.Pointer(&buf[i])) = f
			}
		}
		out, x, y := buf[:n*dt.Size()], buf[n*dt.Size():2*n*dt.Size()], buf[2*n*dt.Size():]
		b.Run(dt.String(), func(b *testing.B) {
			b.SetBytes(int64(n * dt.Size()))
			for b.Loop() {
				_ = allreduce.Combine(dt, allreduce.Sum, out, x, y)
			}
		})
	}
}
