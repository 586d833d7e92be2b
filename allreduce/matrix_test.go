package allreduce_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// The correctness matrix: every collective, on in-process ranks, against the
// sequential reference of allreducetest. Inputs are small integers, so every
// reduction order gives the same value and results are compared bitwise.

const matrixSeed = 0x5eed

// hugeLen is the large length of the matrix: over 1 MiB elements, and not a
// multiple of any rank count, so chunks are uneven.
const hugeLen = 1<<20 + 3

var (
	matrixRanks = []int{1, 2, 3, 4, 5, 7, 8, 13, 16}
	allOps      = []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max, allreduce.Min, allreduce.Prod}
)

// sentinel marks output elements a collective must overwrite. It is larger
// than any result the matrix inputs can produce (|sum| <= 16·1000, |prod| <= 2^16).
const sentinel = 77777

// matrixLens is {0, 1, N-1, N, N+1, 1000} without repeats.
func matrixLens(n int) []int {
	var out []int
	for _, l := range []int{0, 1, n - 1, n, n + 1, 1000} {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// hugeRanks are the rank counts the huge length runs on; short mode trims.
func hugeRanks() []int {
	if testing.Short() {
		return []int{4}
	}
	return []int{1, 2, 3, 4, 5, 8}
}

func hugeOps() []allreduce.ReduceOp {
	if testing.Short() {
		return []allreduce.ReduceOp{allreduce.Sum}
	}
	return []allreduce.ReduceOp{allreduce.Sum, allreduce.Max}
}

// hugeDTypes are the dtypes the huge length runs on for coll: AllReduce gets
// a float and an integer type, the others float32 only.
func hugeDTypes(coll allreduce.Kind) []string {
	if coll == allreduce.KindAllReduce && !testing.Short() {
		return []string{"float32", "int64"}
	}
	return []string{"float32"}
}

// matrixRoots are the roots of Broadcast and Reduce: all of them for up to 5
// ranks, a few otherwise, and fewer again at the huge length.
func matrixRoots(n, length int) []int {
	if length == hugeLen {
		return dedupe([]int{0, n - 1})
	}
	if n <= 5 {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return dedupe([]int{0, 1, n / 2, n - 1})
}

func dedupe(xs []int) []int {
	var out []int
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// mcase is one cell of the matrix.
type mcase struct {
	coll   allreduce.Kind
	n      int
	length int
	op     allreduce.ReduceOp // 0 for AllGather and Broadcast
	root   int                // -1 unless rooted
	dtype  string
}

func (c mcase) name() string {
	s := fmt.Sprintf("ranks=%d/len=%d", c.n, c.length)
	if c.op != 0 {
		s += "/op=" + c.op.String()
	}
	if c.root >= 0 {
		s += fmt.Sprintf("/root=%d", c.root)
	}
	return s + "/dtype=" + c.dtype
}

func hasOp(coll allreduce.Kind) bool {
	return coll == allreduce.KindAllReduce || coll == allreduce.KindReduceScatter || coll == allreduce.KindReduce
}

func rooted(coll allreduce.Kind) bool {
	return coll == allreduce.KindBroadcast || coll == allreduce.KindReduce
}

// matrixCases lists the cells of coll's matrix, in subtest order.
func matrixCases(coll allreduce.Kind) []mcase {
	var out []mcase
	ops := []allreduce.ReduceOp{0}
	if hasOp(coll) {
		ops = allOps
	}
	add := func(n, length int, ops []allreduce.ReduceOp, dtypes []string) {
		roots := []int{-1}
		if rooted(coll) {
			roots = matrixRoots(n, length)
		}
		for _, root := range roots {
			for _, op := range ops {
				for _, dt := range dtypes {
					out = append(out, mcase{coll: coll, n: n, length: length, op: op, root: root, dtype: dt})
				}
			}
		}
	}
	for _, n := range matrixRanks {
		for _, length := range matrixLens(n) {
			add(n, length, ops, []string{"float32", "float64", "int32", "int64"})
		}
		if slices.Contains(hugeRanks(), n) {
			hops := []allreduce.ReduceOp{0}
			if hasOp(coll) {
				hops = hugeOps()
			}
			add(n, hugeLen, hops, hugeDTypes(coll))
		}
	}
	return out
}

func TestMatrix(t *testing.T) {
	for _, coll := range []allreduce.Kind{
		allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindAllGather,
		allreduce.KindBroadcast, allreduce.KindReduce,
	} {
		t.Run(coll.String(), func(t *testing.T) {
			for _, c := range matrixCases(coll) {
				t.Run(c.name(), func(t *testing.T) {
					switch c.dtype {
					case "float32":
						runMatrixCase[float32](t, c)
					case "float64":
						runMatrixCase[float64](t, c)
					case "int32":
						runMatrixCase[int32](t, c)
					case "int64":
						runMatrixCase[int64](t, c)
					}
				})
			}
		})
	}
}

// inputCache keeps the huge inputs, which every huge cell of a dtype shares
// (the reference reduction of them is cheap next to making them).
var inputCache = map[string]any{}

func matrixInputs[T allreduce.Numeric](n, length int, op allreduce.ReduceOp) [][]T {
	if op == 0 || op == allreduce.Avg || op == allreduce.Min || op == allreduce.Max {
		op = allreduce.Sum // Input only treats Prod specially
	}
	key := fmt.Sprintf("%T/%d/%d/%v", *new(T), n, length, op)
	if v, ok := inputCache[key]; ok {
		return v.([][]T)
	}
	in := make([][]T, n)
	for r := range in {
		in[r] = allreducetest.Input[T](matrixSeed+uint64(length), r, length, op)
	}
	if length == hugeLen {
		inputCache[key] = in
	}
	return in
}

// matrixWant is what rank r must hold after the collective.
func matrixWant[T allreduce.Numeric](c mcase, inputs [][]T, ref []T, r int) []T {
	switch c.coll {
	case allreduce.KindAllReduce:
		return ref
	case allreduce.KindReduceScatter:
		lo, hi := allreduce.ChunkBounds(c.length, c.n, r)
		return ref[lo:hi]
	case allreduce.KindAllGather:
		return inputs[0] // rank r contributes chunk r of this global buffer
	case allreduce.KindBroadcast:
		return inputs[c.root]
	case allreduce.KindReduce:
		if r == c.root {
			return ref
		}
		return inputs[r]
	}
	panic("unreachable")
}

func runMatrixCase[T allreduce.Numeric](t *testing.T, c mcase) {
	isFloat := allreduce.DTypeOf[T]().IsFloat()
	if c.op == allreduce.Avg && !isFloat {
		runAvgOnIntegers[T](t, c)
		return
	}
	inputs := matrixInputs[T](c.n, c.length, c.op)
	var ref []T
	if hasOp(c.coll) {
		ref = allreducetest.Reduce(inputs, c.op)
	}
	modes := []string{"sync", "async", "repeat"}
	if c.coll == allreduce.KindReduceScatter || c.coll == allreduce.KindAllGather {
		modes = append(modes, "aliased")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(c.n, 20*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		want := matrixWant(c, inputs, ref, r)
		for _, mode := range modes {
			if err := matrixCall(ctx, g, c, mode, inputs, want); err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// matrixCall runs collective c once on g in the given mode and checks what
// this rank holds against want.
func matrixCall[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c mcase, mode string, inputs [][]T, want []T) error {
	r, n := g.Rank(), g.Size()
	async := mode == "async"
	wait := func(w *allreduce.Work) error {
		err := w.Wait(ctx)
		select {
		case <-w.Done():
		default:
			return errors.New("Work.Wait returned before Done was closed")
		}
		if e2 := w.Err(); e2 != err {
			return fmt.Errorf("Work.Err() = %v after Wait returned %v", e2, err)
		}
		return err
	}
	in := inputs[r]
	switch c.coll {
	case allreduce.KindAllReduce:
		buf := slices.Clone(in)
		var err error
		if async {
			err = wait(allreduce.AllReduceAsync(ctx, g, buf, c.op))
		} else {
			err = allreduce.AllReduce(ctx, g, buf, c.op)
		}
		if err != nil {
			return err
		}
		return diffBits("result", buf, want)

	case allreduce.KindReduceScatter:
		lo, hi := allreduce.ChunkBounds(c.length, n, r)
		src := slices.Clone(in)
		dst := filled[T](hi - lo)
		if mode == "aliased" {
			dst = src[lo:hi] // dst may be src's own chunk
		}
		var err error
		if async {
			err = wait(allreduce.ReduceScatterAsync(ctx, g, dst, src, c.op))
		} else {
			err = allreduce.ReduceScatter(ctx, g, dst, src, c.op)
		}
		if err != nil {
			return err
		}
		if err := diffBits("chunk", dst, want); err != nil {
			return err
		}
		if mode == "aliased" {
			if err := diffBits("src before own chunk", src[:lo], in[:lo]); err != nil {
				return err
			}
			return diffBits("src after own chunk", src[hi:], in[hi:])
		}
		return diffBits("src (must be unchanged)", src, in)

	case allreduce.KindAllGather:
		lo, hi := allreduce.ChunkBounds(c.length, n, r)
		global := inputs[0]
		dst := filled[T](c.length)
		src := slices.Clone(global[lo:hi])
		if mode == "aliased" {
			copy(dst[lo:hi], src)
			src = dst[lo:hi] // src may be dst's own chunk
		}
		var err error
		if async {
			err = wait(allreduce.AllGatherAsync(ctx, g, dst, src))
		} else {
			err = allreduce.AllGather(ctx, g, dst, src)
		}
		if err != nil {
			return err
		}
		if err := diffBits("gathered", dst, want); err != nil {
			return err
		}
		return diffBits("src (must be unchanged)", src, global[lo:hi])

	case allreduce.KindBroadcast:
		buf := slices.Clone(in)
		var err error
		if async {
			err = wait(allreduce.BroadcastAsync(ctx, g, buf, c.root))
		} else {
			err = allreduce.Broadcast(ctx, g, buf, c.root)
		}
		if err != nil {
			return err
		}
		return diffBits("buffer", buf, want)

	case allreduce.KindReduce:
		buf := slices.Clone(in)
		var err error
		if async {
			err = wait(allreduce.ReduceAsync(ctx, g, buf, c.op, c.root))
		} else {
			err = allreduce.Reduce(ctx, g, buf, c.op, c.root)
		}
		if err != nil {
			return err
		}
		what := "root result"
		if r != c.root {
			what = "non-root buffer (must be unchanged)"
		}
		return diffBits(what, buf, want)
	}
	return fmt.Errorf("unknown collective %v", c.coll)
}

// runAvgOnIntegers checks that Avg on an integer dtype is an ErrInvalid
// error on every rank, in the sync form and (on a fresh group) the async one.
func runAvgOnIntegers[T allreduce.Numeric](t *testing.T, c mcase) {
	for _, async := range []bool{false, true} {
		buf := make([]T, c.length)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := allreducetest.RunInproc(c.n, 5*time.Second, func(g *allreduce.Group) error {
			b := slices.Clone(buf)
			var w *allreduce.Work
			switch c.coll {
			case allreduce.KindAllReduce:
				if !async {
					return allreduce.AllReduce(ctx, g, b, allreduce.Avg)
				}
				w = allreduce.AllReduceAsync(ctx, g, b, allreduce.Avg)
			case allreduce.KindReduceScatter:
				lo, hi := allreduce.ChunkBounds(c.length, c.n, g.Rank())
				dst := make([]T, hi-lo)
				if !async {
					return allreduce.ReduceScatter(ctx, g, dst, b, allreduce.Avg)
				}
				w = allreduce.ReduceScatterAsync(ctx, g, dst, b, allreduce.Avg)
			case allreduce.KindReduce:
				if !async {
					return allreduce.Reduce(ctx, g, b, allreduce.Avg, c.root)
				}
				w = allreduce.ReduceAsync(ctx, g, b, allreduce.Avg, c.root)
			}
			return w.Wait(ctx)
		})
		cancel()
		for r, err := range errs {
			if !errors.Is(err, allreduce.ErrInvalid) {
				t.Errorf("async=%v rank %d: Avg on %T: got %v, want an error wrapping ErrInvalid", async, r, *new(T), err)
			}
		}
	}
}

// filled returns n sentinels.
func filled[T allreduce.Numeric](n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = sentinel
	}
	return out
}

// rawBytes views s as its bytes.
func rawBytes[T allreduce.Numeric](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// diffBits reports the first element where got and want differ bitwise.
func diffBits[T allreduce.Numeric](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	gb, wb := rawBytes(got), rawBytes(want)
	if bytes.Equal(gb, wb) {
		return nil
	}
	first, count := -1, 0
	for i := range got {
		es := len(gb) / len(got)
		if !bytes.Equal(gb[i*es:(i+1)*es], wb[i*es:(i+1)*es]) {
			if first < 0 {
				first = i
			}
			count++
		}
	}
	return fmt.Errorf("%s: %d of %d elements differ bitwise; first at %d: got %v, want %v",
		what, count, len(got), first, got[first], want[first])
}

// TestAllReduceRandomFloats reduces non-integer data, where the order of
// reduction matters, and compares with the reference within a relative
// tolerance (Max and Min exactly). It also checks that every rank ends
// bitwise identical.
func TestAllReduceRandomFloats(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8, 13} {
		for _, length := range []int{1, 7, 1000, 4099} {
			for _, op := range allOps {
				t.Run(fmt.Sprintf("ranks=%d/len=%d/op=%v/dtype=float32", n, length, op), func(t *testing.T) {
					randomFloatCase[float32](t, n, length, op, 2e-6)
				})
				t.Run(fmt.Sprintf("ranks=%d/len=%d/op=%v/dtype=float64", n, length, op), func(t *testing.T) {
					randomFloatCase[float64](t, n, length, op, 1e-14)
				})
			}
		}
	}
}

// randomFloats makes rank's random floats: normal values, or for Prod
// values in [0.5, 1.5) so that products neither overflow nor vanish.
func randomFloats[T float32 | float64](seed uint64, rank, n int, op allreduce.ReduceOp) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1000))
	out := make([]T, n)
	for i := range out {
		if op == allreduce.Prod {
			out[i] = T(0.5 + rng.Float64())
		} else {
			out[i] = T(rng.NormFloat64() * 100)
		}
	}
	return out
}

// runRandom all-reduces random floats once on a fresh world and returns every
// rank's result.
func runRandom[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp, seed uint64) (inputs, outs [][]T) {
	t.Helper()
	inputs = make([][]T, n)
	outs = make([][]T, n)
	for r := range inputs {
		inputs[r] = randomFloats[T](seed, r, length, op)
		outs[r] = slices.Clone(inputs[r])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		return allreduce.AllReduce(ctx, g, outs[g.Rank()], op)
	})
	if err := allreducetest.FirstError(errs); err != nil {
		t.Fatal(err)
	}
	return inputs, outs
}

func randomFloatCase[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp, rel float64) {
	seed := uint64(n*1_000_003 + length*31 + int(op))
	inputs, outs := runRandom[T](t, n, length, op, seed)
	ref := allreducetest.Reduce(inputs, op)
	for r := 1; r < n; r++ {
		if err := diffBits(fmt.Sprintf("rank %d vs rank 0", r), outs[r], outs[0]); err != nil {
			t.Fatalf("ranks differ: %v", err)
		}
	}
	got := outs[0]
	for i := range ref {
		g, w := float64(got[i]), float64(ref[i])
		switch op {
		case allreduce.Max, allreduce.Min:
			if g != w {
				t.Fatalf("element %d: got %v, want exactly %v", i, g, w)
			}
		case allreduce.Sum, allreduce.Avg:
			// Bound the rounding error by the magnitude of the terms, not of
			// the (possibly cancelling) sum.
			var mag float64
			for r := range inputs {
				mag += math.Abs(float64(inputs[r][i]))
			}
			if op == allreduce.Avg {
				mag /= float64(n)
			}
			if math.Abs(g-w) > rel*float64(n)*mag {
				t.Fatalf("element %d: got %v, want %v (within %g of %g)", i, g, w, rel*float64(n), mag)
			}
		case allreduce.Prod:
			if math.Abs(g-w) > rel*float64(n)*math.Abs(w) {
				t.Fatalf("element %d: got %v, want %v (relative %g)", i, g, w, rel*float64(n))
			}
		}
	}
}

// TestAllReduceFloatDeterministic checks that float all-reduce of random
// (non-integer) data is bitwise identical on every rank and across two runs
// on fresh worlds: the reduction order of each chunk is fixed.
func TestAllReduceFloatDeterministic(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 16} {
		for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Prod} {
			t.Run(fmt.Sprintf("ranks=%d/op=%v/dtype=float32", n, op), func(t *testing.T) {
				floatDeterministic[float32](t, n, 10007, op)
			})
			t.Run(fmt.Sprintf("ranks=%d/op=%v/dtype=float64", n, op), func(t *testing.T) {
				floatDeterministic[float64](t, n, 10007, op)
			})
		}
	}
}

func floatDeterministic[T float32 | float64](t *testing.T, n, length int, op allreduce.ReduceOp) {
	seed := uint64(99 + n)
	_, first := runRandom[T](t, n, length, op, seed)
	_, second := runRandom[T](t, n, length, op, seed)
	for r := range first {
		if err := diffBits(fmt.Sprintf("rank %d vs rank 0", r), first[r], first[0]); err != nil {
			t.Fatalf("first run: %v", err)
		}
		if err := diffBits(fmt.Sprintf("rank %d, second run vs first", r), second[r], first[r]); err != nil {
			t.Fatal(err)
		}
	}
	// The data really is order-sensitive: summing in another order changes
	// some element, so the equality above is not vacuous.
	if op == allreduce.Sum && n >= 3 {
		inputs := make([][]T, n)
		for r := range inputs {
			inputs[r] = randomFloats[T](seed, r, length, op)
		}
		fwd := allreducetest.Reduce(inputs, op)
		slices.Reverse(inputs)
		rev := allreducetest.Reduce(inputs, op)
		if diffBits("reverse", rev, fwd) == nil {
			t.Logf("note: reversing the summation order changed nothing for ranks=%d", n)
		}
	}
}
