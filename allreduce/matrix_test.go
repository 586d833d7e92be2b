package allreduce_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

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

// hugeCells says which (op, dtype) cells coll runs at the huge length on n
// ranks. AllReduce runs it on ranks {1, 2, 3, 4, 5, 8} with Sum, and with Max
// and int64 on some of them; the other collectives, whose large-buffer code
// paths are the same at every rank count, on one or two rank counts. Short
// mode keeps a single cell. The huge cells dominate the run time under -race.
func hugeCells(coll string, n int) (ops []allreduce.ReduceOp, dtypes []string) {
	sum, max := allreduce.Sum, allreduce.Max
	if testing.Short() {
		if coll == "AllReduce" && n == 4 {
			return []allreduce.ReduceOp{sum}, []string{"float32"}
		}
		return nil, nil
	}
	f32 := []string{"float32"}
	switch coll {
	case "AllReduce":
		switch n {
		case 1, 2, 4, 5:
			return []allreduce.ReduceOp{sum}, f32
		case 3:
			return []allreduce.ReduceOp{max}, []string{"float32", "int64"}
		case 8:
			return []allreduce.ReduceOp{sum, max}, f32
		}
	case "AllReduceRing":
		switch n {
		case 3:
			return []allreduce.ReduceOp{sum, max}, f32
		case 8:
			return []allreduce.ReduceOp{sum}, f32
		}
	case "ReduceScatter":
		switch n {
		case 3:
			return []allreduce.ReduceOp{sum, max}, f32
		case 5:
			return []allreduce.ReduceOp{sum}, f32
		}
	case "Reduce":
		if n == 5 {
			return []allreduce.ReduceOp{sum}, f32
		}
	case "AllGather":
		if n == 5 {
			return []allreduce.ReduceOp{0}, f32
		}
	case "Broadcast":
		if n == 8 {
			return []allreduce.ReduceOp{0}, f32
		}
	}
	return nil, nil
}

// matrixRoots are the roots of coll (Broadcast or Reduce): for Broadcast
// all of them up to 5 ranks, a few otherwise; for Reduce, whose matrix is
// five times larger (ops), a few always; one at the huge length.
func matrixRoots(coll allreduce.Kind, n, length int) []int {
	if length == hugeLen {
		return []int{n - 1}
	}
	if n <= 5 && coll == allreduce.KindBroadcast {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for _, r := range dedupe([]int{0, 1, n / 2, n - 1}) {
		if r < n {
			out = append(out, r)
		}
	}
	return out
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
	algo   allreduce.Algorithm // AllReduce only
	n      int
	length int
	op     allreduce.ReduceOp // 0 for AllGather and Broadcast
	root   int                // -1 unless rooted
	roots  []int              // rooted collectives: every root, run in turn in one world
	dtype  string
}

func (c mcase) name() string {
	s := fmt.Sprintf("ranks=%d/len=%d", c.n, c.length)
	if c.op != 0 {
		s += "/op=" + c.op.String()
	}
	if c.root >= 0 && c.roots == nil {
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

// matrixColls are the matrix's collectives by subtest name: AllReduce with
// the default algorithm (Direct on inproc) and with Ring, then the others.
var matrixColls = []struct {
	name string
	coll allreduce.Kind
	algo allreduce.Algorithm
}{
	{"AllReduce", allreduce.KindAllReduce, allreduce.Auto},
	{"AllReduceRing", allreduce.KindAllReduce, allreduce.Ring},
	{"AllReduceDoubling", allreduce.KindAllReduce, allreduce.Doubling},
	{"ReduceScatter", allreduce.KindReduceScatter, allreduce.Auto},
	{"AllGather", allreduce.KindAllGather, allreduce.Auto},
	{"Broadcast", allreduce.KindBroadcast, allreduce.Auto},
	{"Reduce", allreduce.KindReduce, allreduce.Auto},
}

// matrixCases lists the cells of one collective's matrix, in subtest order.
func matrixCases(name string, coll allreduce.Kind, algo allreduce.Algorithm) []mcase {
	var out []mcase
	ops := []allreduce.ReduceOp{0}
	if hasOp(coll) {
		ops = allOps
	}
	add := func(n, length int, ops []allreduce.ReduceOp, dtypes []string) {
		var roots []int
		if rooted(coll) {
			roots = matrixRoots(coll, n, length)
		}
		for _, op := range ops {
			for _, dt := range dtypes {
				out = append(out, mcase{coll: coll, algo: algo, n: n, length: length, op: op, root: -1, roots: roots, dtype: dt})
			}
		}
	}
	for _, n := range matrixRanks {
		for _, length := range matrixLens(n) {
			add(n, length, ops, []string{"float32", "float64", "int32", "int64"})
		}
		if ops, dtypes := hugeCells(name, n); len(ops) > 0 {
			add(n, hugeLen, ops, dtypes)
		}
	}
	return out
}

func TestMatrix(t *testing.T) {
	t.Cleanup(func() { clear(inputCache); clear(refCache) })
	for _, mc := range matrixColls {
		t.Run(mc.name, func(t *testing.T) {
			for _, c := range matrixCases(mc.name, mc.coll, mc.algo) {
				t.Run(c.name(), func(t *testing.T) { runCase(t, c) })
			}
		})
	}
}

func runCase(t *testing.T, c mcase) {
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
	if c.roots != nil {
		// One world runs the collective from every root in turn.
		if c.op == allreduce.Avg && !isFloat {
			c.root = c.roots[len(c.roots)-1]
			runAvgOnIntegers[T](t, c)
			return
		}
		runRootedCase[T](t, c)
		return
	}
	if c.op == allreduce.Avg && !isFloat {
		runAvgOnIntegers[T](t, c)
		return
	}
	inputs := matrixInputs[T](c.n, c.length, c.op)
	var ref []T
	if hasOp(c.coll) {
		ref = matrixRef(inputs, c.length, c.op)
	}
	// The huge cells run once each way; the repeat and aliasing checks are
	// the same code at every length.
	modes := []string{"sync", "async"}
	if c.length != hugeLen {
		modes = append(modes, "repeat")
		if c.coll == allreduce.KindReduceScatter || c.coll == allreduce.KindAllGather {
			modes = append(modes, "aliased")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(c.n, 20*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		if c.coll == allreduce.KindAllReduce && c.algo == allreduce.Ring && g.Algorithm() != allreduce.Ring {
			return fmt.Errorf("group runs %v, want ring", g.Algorithm())
		}
		want := matrixWant(c, inputs, ref, r)
		for _, mode := range modes {
			if err := matrixCall(ctx, g, c, mode, inputs, want); err != nil {
				err = fmt.Errorf("%s: %w", mode, err)
				g.Abort(err) // a wrong result: let the other ranks stop too
				return err
			}
		}
		return nil
	}, allreduce.WithAlgorithm(c.algo))
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// runRootedCase runs a Broadcast or Reduce cell from each of its roots in
// turn, on one world.
func runRootedCase[T allreduce.Numeric](t *testing.T, c mcase) {
	inputs := matrixInputs[T](c.n, c.length, c.op)
	var ref []T
	if hasOp(c.coll) {
		ref = matrixRef(inputs, c.length, c.op)
	}
	modes := []string{"sync", "async"}
	if c.length != hugeLen {
		modes = append(modes, "repeat")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(c.n, 20*time.Second, func(g *allreduce.Group) error {
		for _, root := range c.roots {
			cc := c
			cc.root = root
			want := matrixWant(cc, inputs, ref, g.Rank())
			for _, mode := range modes {
				if err := matrixCall(ctx, g, cc, mode, inputs, want); err != nil {
					err = fmt.Errorf("root %d, %s: %w", root, mode, err)
					g.Abort(err)
					return err
				}
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

// refCache keeps the reference results of the huge inputs.
var refCache = map[string]any{}

func matrixRef[T allreduce.Numeric](inputs [][]T, length int, op allreduce.ReduceOp) []T {
	key := fmt.Sprintf("%T/%d/%d/%v", *new(T), len(inputs), length, op)
	if v, ok := refCache[key]; ok {
		return v.([]T)
	}
	ref := allreducetest.Reduce(inputs, op)
	if length == hugeLen {
		refCache[key] = ref
	}
	return ref
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
		}, allreduce.WithAlgorithm(c.algo))
		cancel()
		for r, err := range errs {
			if !errors.Is(err, allreduce.ErrInvalid) {
				t.Errorf("async=%v rank %d: Avg on %T: got %v, want an error wrapping ErrInvalid", async, r, *new(T), err)
			}
		}
	}
}

// TestAllReduceOneShotBoundary runs the default AllReduce (Direct on
// inproc) around the size where it switches from one-shot to two-shot
// (32 KiB), which the matrix lengths do not reach except at the huge one.
func TestAllReduceOneShotBoundary(t *testing.T) {
	for _, n := range []int{2, 7} {
		for _, dt := range []string{"float32", "float64", "int32", "int64"} {
			es := 4
			if dt == "float64" || dt == "int64" {
				es = 8
			}
			for _, length := range []int{32<<10/es - 1, 32<<10/es + 0, 32<<10/es + 1} {
				for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max} {
					if op == allreduce.Avg && (dt == "int32" || dt == "int64") {
						continue
					}
					c := mcase{coll: allreduce.KindAllReduce, n: n, length: length, op: op, root: -1, dtype: dt}
					t.Run(c.name(), func(t *testing.T) { runCase(t, c) })
				}
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

// TestBarrier checks that no rank leaves a Barrier before every rank has
// entered it, for ranks arriving at different times.
func TestBarrier(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			var mu sync.Mutex
			var lastIn time.Time
			out := make([]time.Time, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := allreducetest.RunInproc(n, 5*time.Second, func(g *allreduce.Group) error {
				for round := range 3 {
					time.Sleep(time.Duration((g.Rank()*7+round*3)%5) * 5 * time.Millisecond)
					mu.Lock()
					if in := time.Now(); in.After(lastIn) {
						lastIn = in
					}
					mu.Unlock()
					if err := allreduce.Barrier(ctx, g); err != nil {
						return err
					}
					now := time.Now()
					mu.Lock()
					early := now.Before(lastIn)
					out[g.Rank()] = now
					mu.Unlock()
					if early {
						return fmt.Errorf("round %d: left the barrier before the last rank entered", round)
					}
				}
				return nil
			})
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Named element types are reduced as their underlying types.
type (
	myF32 float32
	myF64 float64
	myI32 int32
	myI64 int64
)

func TestNamedElementTypes(t *testing.T) {
	require.Equal(t, allreduce.Float32, allreduce.DTypeOf[myF32]())
	require.Equal(t, allreduce.Float64, allreduce.DTypeOf[myF64]())
	require.Equal(t, allreduce.Int32, allreduce.DTypeOf[myI32]())
	require.Equal(t, allreduce.Int64, allreduce.DTypeOf[myI64]())
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring, allreduce.Doubling} {
		errs := allreducetest.RunInproc(3, 5*time.Second, func(g *allreduce.Group) error {
			ctx := context.Background()
			f := []myF32{1.5, myF32(g.Rank())}
			if err := allreduce.AllReduce(ctx, g, f, allreduce.Avg); err != nil {
				return err
			}
			if f[0] != 1.5 || f[1] != 1 {
				return fmt.Errorf("myF32 Avg: got %v, want [1.5 1]", f)
			}
			i := []myI64{myI64(g.Rank()), 10}
			if err := allreduce.AllReduce(ctx, g, i, allreduce.Max); err != nil {
				return err
			}
			if i[0] != 2 || i[1] != 10 {
				return fmt.Errorf("myI64 Max: got %v, want [2 10]", i)
			}
			return nil
		}, allreduce.WithAlgorithm(algo))
		require.NoError(t, allreducetest.FirstError(errs), "algo=%v", algo)
	}
}
