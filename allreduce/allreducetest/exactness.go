package allreducetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/numeric"
)

// The exactness check: random programs of collectives on inputs full of
// special values (±0, NaN with different payloads and signs, ±Inf,
// denormals, the extreme integers), run on any transport. Every rank must
// end bitwise identical wherever the collective gives ranks the same
// result, every result must agree with the sequential reference (NaN for
// NaN; for Sum, Avg and Prod even the sign of zero), and a second run of the
// same program must give the same bits.

// Op is one collective of a random program, the same on every rank.
type Op struct {
	Kind  allreduce.Kind
	DType allreduce.DType
	Op    allreduce.ReduceOp
	Root  int
	Count int
	Seed  uint64 // the inputs' seed
}

func (o Op) String() string {
	return fmt.Sprintf("%v(%v × %d, %v, root %d, seed %#x)", o.Kind, o.DType, o.Count, o.Op, o.Root, o.Seed)
}

// RandomProgram makes length collectives for n ranks from seed: every kind,
// dtype and op (Avg on floats only), counts from 0 up to maxCount with the
// awkward ones (0, 1, N-1, N+1) favoured.
func RandomProgram(seed uint64, n, length, maxCount int) []Op {
	rng := rand.New(rand.NewPCG(seed, 0x0e4ac7))
	kinds := []allreduce.Kind{allreduce.KindAllReduce, allreduce.KindAllReduce, allreduce.KindReduceScatter,
		allreduce.KindAllGather, allreduce.KindBroadcast, allreduce.KindReduce, allreduce.KindBarrier}
	dtypes := []allreduce.DType{allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64, allreduce.Float16, allreduce.BFloat16}
	ops := []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max, allreduce.Min, allreduce.Prod}
	prog := make([]Op, length)
	for i := range prog {
		o := Op{Kind: kinds[rng.IntN(len(kinds))], DType: dtypes[rng.IntN(len(dtypes))], Root: rng.IntN(n), Seed: rng.Uint64()}
		o.Op = ops[rng.IntN(len(ops))]
		if o.Op == allreduce.Avg && !o.DType.IsFloat() {
			o.Op = allreduce.Sum
		}
		switch rng.IntN(6) {
		case 0:
			o.Count = []int{0, 1, max(n-1, 0), n + 1}[rng.IntN(4)]
		case 1:
			o.Count = rng.IntN(maxCount + 1)
		default:
			o.Count = rng.IntN(min(maxCount, 64) + 1)
		}
		prog[i] = o
	}
	return prog
}

// Special values. Sums of these in any order give the same value: the
// integers are small, the denormals are small multiples of the smallest
// denormal (added exactly), and a lane never mixes denormals with
// integers. So the reference, which reduces in rank order, is exact for
// every algorithm's order.
var (
	nanBits32 = []uint32{0x7fc00000, 0xffc00000, 0x7fc00001, 0x7fa00000, 0xffe12345, 0x7f800001}
	nanBits64 = []uint64{0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000000001, 0x7ff4000000000000,
		0xfffc0000deadbeef, 0x7ff0000000000001}
)

// SpecialInput is rank's input of count elements of type T for op, from
// seed: lane i (i mod 4 == 3) holds denormals, the others small integers,
// and about one element in four of any lane is a special value.
func SpecialInput[T numeric.Arith](seed uint64, rank, count int, op allreduce.ReduceOp) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	out := make([]T, count)
	isFloat := allreduce.DTypeOf[T]().IsFloat()
	for i := range out {
		special := rng.IntN(4) == 0
		switch {
		case !isFloat && special:
			out[i] = intSpecial[T](rng)
		case !isFloat:
			out[i] = T(rng.IntN(11) - 5)
		case special:
			out[i] = floatSpecial[T](rng)
		case i%4 == 3 && op != allreduce.Prod:
			out[i] = denormal[T](rng.IntN(7) - 3)
		case op == allreduce.Prod:
			out[i] = T([]int{-1, 1, 1, 2}[rng.IntN(4)])
		default:
			out[i] = T(rng.IntN(11) - 5)
		}
	}
	return out
}

func intSpecial[T numeric.Arith](rng *rand.Rand) T {
	var z T
	if unsafe.Sizeof(z) == 4 {
		return T([]int32{math.MaxInt32, math.MinInt32, 0, -1}[rng.IntN(4)])
	}
	return T([]int64{math.MaxInt64, math.MinInt64, 0, -1}[rng.IntN(4)])
}

// floatSpecial is +0, -0, +Inf, -Inf or a NaN of some payload and sign.
func floatSpecial[T numeric.Arith](rng *rand.Rand) T {
	var z T
	four := unsafe.Sizeof(z) == 4
	switch rng.IntN(5) {
	case 0:
		return 0
	case 1:
		return T(math.Copysign(0, -1))
	case 2:
		return T(math.Inf(1))
	case 3:
		return T(math.Inf(-1))
	}
	if four {
		b := nanBits32[rng.IntN(len(nanBits32))]
		return *(*T)(unsafe.Pointer(&b))
	}
	b := nanBits64[rng.IntN(len(nanBits64))]
	return *(*T)(unsafe.Pointer(&b))
}

// denormal is k times the smallest positive denormal of T.
func denormal[T numeric.Arith](k int) T {
	var z T
	if unsafe.Sizeof(z) == 4 {
		b := math.Float32bits(math.SmallestNonzeroFloat32) * uint32(abs(k))
		v := math.Float32frombits(b)
		if k < 0 {
			v = -v
		}
		return T(v)
	}
	v := math.SmallestNonzeroFloat64 * float64(abs(k))
	if k < 0 {
		v = -v
	}
	return T(v)
}

func abs(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

// Outcome is what one rank holds after one collective: the bytes of its
// output (AllReduce, Broadcast, AllGather: the whole buffer; ReduceScatter:
// its chunk; Reduce: the root's buffer, nil elsewhere; Barrier: nil).
type Outcome [][]byte

// RunProgram runs prog on every rank of conns (fresh connections) and
// returns each rank's outcome of each op, or the ranks' errors.
func RunProgram(conns []transport.Conn, prog []Op, timeout time.Duration, opts ...allreduce.GroupOption) ([]Outcome, error) {
	n := len(conns)
	outs := make([]Outcome, n)
	errs := RunRanks(conns, func(g *allreduce.Group) error {
		ctx, cancel := Ctx(timeout)
		defer cancel()
		r := g.Rank()
		for i, o := range prog {
			out, err := dispatch(ctx, g, o)
			if err != nil {
				return fmt.Errorf("op %d %v: %w", i, o, err)
			}
			outs[r] = append(outs[r], out)
		}
		return nil
	}, opts...)
	if err := FirstError(errs); err != nil {
		return nil, err
	}
	return outs, nil
}

func runOp[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, o Op) ([]byte, error) {
	r, n := g.Rank(), g.Size()
	in := specialInputOf[T](o.Seed, r, o.Count, o.Op)
	switch o.Kind {
	case allreduce.KindAllReduce:
		return bytesOf(in), allreduce.AllReduce(ctx, g, in, o.Op)
	case allreduce.KindReduceScatter:
		lo, hi := allreduce.ChunkBounds(o.Count, n, r)
		dst := make([]T, hi-lo)
		return bytesOf(dst), allreduce.ReduceScatter(ctx, g, dst, in, o.Op)
	case allreduce.KindAllGather:
		lo, hi := allreduce.ChunkBounds(o.Count, n, r)
		dst := make([]T, o.Count)
		return bytesOf(dst), allreduce.AllGather(ctx, g, dst, in[lo:hi])
	case allreduce.KindBroadcast:
		return bytesOf(in), allreduce.Broadcast(ctx, g, in, o.Root)
	case allreduce.KindReduce:
		err := allreduce.Reduce(ctx, g, in, o.Op, o.Root)
		if r != o.Root {
			return nil, err
		}
		return bytesOf(in), err
	case allreduce.KindBarrier:
		return nil, allreduce.Barrier(ctx, g)
	}
	return nil, fmt.Errorf("unknown kind %v", o.Kind)
}

func bytesOf[T allreduce.Numeric](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// CheckProgram checks every rank's outcomes of prog: bitwise identical
// across ranks where the collective promises one result, equal to the
// sequential reference, and the inputs of Broadcast and AllGather delivered
// bit for bit.
func CheckProgram(prog []Op, outs []Outcome) error {
	n := len(outs)
	for i, o := range prog {
		var err error
		switch o.DType {
		case allreduce.Float32:
			err = checkOp[float32](o, n, outs, i)
		case allreduce.Float64:
			err = checkOp[float64](o, n, outs, i)
		case allreduce.Int32:
			err = checkOp[int32](o, n, outs, i)
		case allreduce.Int64:
			err = checkOp[int64](o, n, outs, i)
		case allreduce.Float16:
			err = checkOp[numeric.Float16](o, n, outs, i)
		case allreduce.BFloat16:
			err = checkOp[numeric.BFloat16](o, n, outs, i)
		}
		if err != nil {
			return fmt.Errorf("op %d %v on %d ranks: %w", i, o, n, err)
		}
	}
	return nil
}

func checkOp[T allreduce.Numeric](o Op, n int, outs []Outcome, i int) error {
	inputs := make([][]T, n)
	for r := range inputs {
		inputs[r] = specialInputOf[T](o.Seed, r, o.Count, o.Op)
	}
	switch o.Kind {
	case allreduce.KindAllReduce:
		if err := sameOnEveryRank(outs, i); err != nil {
			return err
		}
		return specialChecker(inputs, o.Op)(asElems[T](outs[0][i]), 0, o.Count)
	case allreduce.KindReduceScatter:
		check := specialChecker(inputs, o.Op)
		for r := range outs {
			lo, hi := allreduce.ChunkBounds(o.Count, n, r)
			if err := check(asElems[T](outs[r][i]), lo, hi); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
	case allreduce.KindAllGather:
		if err := sameOnEveryRank(outs, i); err != nil {
			return err
		}
		for r := range inputs {
			lo, hi := allreduce.ChunkBounds(o.Count, n, r)
			if !bytes.Equal(outs[0][i][lo*elemSize[T]():hi*elemSize[T]()], bytesOf(inputs[r][lo:hi])) {
				return fmt.Errorf("rank %d's chunk is not delivered bit for bit", r)
			}
		}
	case allreduce.KindBroadcast:
		if err := sameOnEveryRank(outs, i); err != nil {
			return err
		}
		if !bytes.Equal(outs[0][i], bytesOf(inputs[o.Root])) {
			return fmt.Errorf("the root's buffer is not delivered bit for bit")
		}
	case allreduce.KindReduce:
		return specialChecker(inputs, o.Op)(asElems[T](outs[o.Root][i]), 0, o.Count)
	}
	return nil
}

func elemSize[T allreduce.Numeric]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

func asElems[T allreduce.Numeric](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/elemSize[T]())
}

func sameOnEveryRank(outs []Outcome, i int) error {
	for r := 1; r < len(outs); r++ {
		if !bytes.Equal(outs[r][i], outs[0][i]) {
			at := firstDiff(outs[r][i], outs[0][i])
			return fmt.Errorf("rank %d differs from rank 0 at byte %d (%x vs %x)", r, at,
				window(outs[r][i], at), window(outs[0][i], at))
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for k := range min(len(a), len(b)) {
		if a[k] != b[k] {
			return k
		}
	}
	return min(len(a), len(b))
}

func window(b []byte, at int) []byte { return b[at&^7 : min(len(b), at&^7+8)] }

// specialReference is reference.Reduce with the element-wise rules that
// make special values comparable: Max and Min propagate NaN, as the
// collectives do.
func specialReference[T numeric.Arith](inputs [][]T, op allreduce.ReduceOp) []T {
	out := append([]T(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		for k, x := range in {
			y := out[k]
			switch op {
			case allreduce.Sum, allreduce.Avg:
				out[k] = y + x
			case allreduce.Prod:
				out[k] = y * x
			case allreduce.Max:
				if x > y || x != x {
					out[k] = x
				}
			case allreduce.Min:
				if x < y || x != x {
					out[k] = x
				}
			}
		}
	}
	if op == allreduce.Avg {
		for k := range out {
			out[k] /= T(len(inputs))
		}
	}
	return out
}

// matchesReference compares got with want element by element: integers
// bitwise; floats NaN for NaN (payloads depend on the order of reduction),
// otherwise equal, and for Sum, Avg and Prod with the same sign of zero
// (Max and Min of +0 and -0 may keep either, by order).
func matchesReference[T numeric.Arith](got, want []T, op allreduce.ReduceOp, off int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	for k := range got {
		g, w := got[k], want[k]
		gnan, wnan := g != g, w != w
		ok := gnan == wnan && (gnan || g == w)
		if ok && !gnan && g == 0 && op != allreduce.Max && op != allreduce.Min {
			ok = math.Signbit(float64(g)) == math.Signbit(float64(w))
		}
		if !ok {
			return fmt.Errorf("element %d is %v, the reference %v", off+k, g, w)
		}
	}
	return nil
}

// SameOutcomes reports the first difference between two runs of one
// program, bit for bit.
func SameOutcomes(a, b []Outcome) error {
	for r := range a {
		for i := range a[r] {
			if !bytes.Equal(a[r][i], b[r][i]) {
				return fmt.Errorf("rank %d, op %d: two runs differ at byte %d", r, i, firstDiff(a[r][i], b[r][i]))
			}
		}
	}
	return nil
}
