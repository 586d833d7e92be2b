package allreducetest

// Running one cell: its inputs and sequential reference, the call in each
// mode (sync, async, repeat, aliased), and the bitwise check of every rank's
// result.

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/numeric"
)

// job is what each rank does for cell c. Inputs and references are made
// here, on the test's goroutine; the ranks only read them.
func (m *matrix) job(c cell) func(g *allreduce.Group) error {
	switch c.dt {
	case allreduce.Float64:
		return cellJob[float64](m, c)
	case allreduce.Int32:
		return cellJob[int32](m, c)
	case allreduce.Int64:
		return cellJob[int64](m, c)
	case allreduce.Float16:
		return cellJob[numeric.Float16](m, c)
	case allreduce.BFloat16:
		return cellJob[numeric.BFloat16](m, c)
	}
	return cellJob[float32](m, c)
}

// matrixInputs is every rank's input of n ranks for op at length (rank
// r's input does not depend on n, so the largest world's serve all).
func matrixInputs[T allreduce.Numeric](m *matrix, n, length int, op allreduce.ReduceOp) [][]T {
	key := inputKey{dt: allreduce.DTypeOf[T](), length: length, prodish: op == allreduce.Prod}
	in, _ := m.inputs[key].([][]T)
	for r := len(in); r < n; r++ {
		in = append(in, inputOf[T](m.cfg.Seed+uint64(length), r, length, op))
	}
	m.inputs[key] = in
	return in[:n]
}

func matrixRef[T allreduce.Numeric](m *matrix, inputs [][]T, length int, op allreduce.ReduceOp) []T {
	key := refKey{dt: allreduce.DTypeOf[T](), n: len(inputs), length: length, op: op}
	if v, ok := m.refs[key]; ok {
		return v.([]T)
	}
	ref := reduceOf(inputs, op)
	m.refs[key] = ref
	return ref
}

func cellJob[T allreduce.Numeric](m *matrix, c cell) func(g *allreduce.Group) error {
	if c.coll == allreduce.KindBarrier {
		return func(g *allreduce.Group) error {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
			defer cancel()
			for i, async := range []bool{false, true, false} {
				if err := callMode(ctx, "barrier", async, func() error { return allreduce.Barrier(ctx, g) },
					func() *allreduce.Work { return allreduce.BarrierAsync(ctx, g) }); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
			}
			return nil
		}
	}
	inputs := matrixInputs[T](m, c.n, c.length, c.op)
	var ref []T
	if hasOp(c.coll) {
		ref = matrixRef(m, inputs, c.length, c.op)
	}
	// The huge cells run once each way (in the race subset synchronously:
	// the async path is the same at every length); the repeat and aliasing
	// checks are the same code at every length.
	modes := []string{"sync", "async"}
	if m.cfg.SyncOnly || c.huge && m.thin {
		modes = modes[:1]
	} else if !c.huge {
		modes = append(modes, "repeat")
		if c.coll == allreduce.KindReduceScatter || c.coll == allreduce.KindAllGather {
			modes = append(modes, "aliased")
		}
	}
	roots := c.roots
	if roots == nil {
		roots = []int{-1}
	}
	return func(g *allreduce.Group) error {
		if c.coll == allreduce.KindAllReduce && c.algo != allreduce.Auto && g.Algorithm() != c.algo {
			return fmt.Errorf("group runs %v, want %v", g.Algorithm(), c.algo)
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
		defer cancel()
		for _, root := range roots {
			want := matrixWant(c, root, inputs, ref, g.Rank())
			for _, mode := range modes {
				if err := matrixCall(ctx, g, c, root, mode, inputs, want); err != nil {
					if root >= 0 {
						return fmt.Errorf("root %d, %s: %w", root, mode, err)
					}
					return fmt.Errorf("%s: %w", mode, err)
				}
			}
		}
		return nil
	}
}

// matrixWant is what rank r must hold after the collective.
func matrixWant[T allreduce.Numeric](c cell, root int, inputs [][]T, ref []T, r int) []T {
	switch c.coll {
	case allreduce.KindAllReduce:
		return ref
	case allreduce.KindReduceScatter:
		lo, hi := allreduce.ChunkBounds(c.length, c.n, r)
		return ref[lo:hi]
	case allreduce.KindAllGather:
		return inputs[0] // rank r contributes chunk r of this global buffer
	case allreduce.KindBroadcast:
		return inputs[root]
	case allreduce.KindReduce:
		if r == root {
			return ref
		}
		return inputs[r]
	}
	panic("unreachable")
}

// callMode runs one collective synchronously (sync) or as a Work (async),
// checking the Work's Wait, Done and Err agree.
func callMode(ctx context.Context, what string, async bool, sync func() error, start func() *allreduce.Work) error {
	if !async {
		return sync()
	}
	w := start()
	err := w.Wait(ctx)
	select {
	case <-w.Done():
	default:
		return fmt.Errorf("%s: Work.Wait returned before Done was closed", what)
	}
	if e2 := w.Err(); e2 != err {
		return fmt.Errorf("%s: Work.Err() = %v after Wait returned %v", what, e2, err)
	}
	return err
}

// sentinel marks output elements a collective must overwrite. No result of
// the matrix inputs equals it: sums of up to 32 ranks are at most 32·1000
// in magnitude, products are ±2^k. The 16-bit types' sentinels are NaNs
// with a payload, which no combine step returns (its NaNs are canonical)
// and no matrix input holds.
const (
	sentinel     = 77777
	sentinelF16  = numeric.Float16(0x7d5a)
	sentinelBF16 = numeric.BFloat16(0x7f9a)
)

// Filled returns n copies of a value no result of the matrix's inputs
// (Input) equals, for output buffers a collective must overwrite.
func Filled[T allreduce.Numeric](n int) []T {
	var v T
	switch p := any(&v).(type) {
	case *numeric.Float16:
		*p = sentinelF16
	case *numeric.BFloat16:
		*p = sentinelBF16
	default: // float32, float64, int32, int64 or a named type over one
		if rv := reflect.ValueOf(p).Elem(); rv.CanFloat() {
			rv.SetFloat(sentinel)
		} else {
			rv.SetInt(sentinel)
		}
	}
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// matrixCall runs collective c once on g in the given mode and checks what
// this rank holds against want.
func matrixCall[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, c cell, root int, mode string, inputs [][]T, want []T) error {
	r, n := g.Rank(), g.Size()
	async := mode == "async"
	in := inputs[r]
	switch c.coll {
	case allreduce.KindAllReduce:
		buf := slices.Clone(in)
		if err := callMode(ctx, "AllReduce", async,
			func() error { return allreduce.AllReduce(ctx, g, buf, c.op) },
			func() *allreduce.Work { return allreduce.AllReduceAsync(ctx, g, buf, c.op) }); err != nil {
			return err
		}
		return DiffBits("result", buf, want)

	case allreduce.KindReduceScatter:
		lo, hi := allreduce.ChunkBounds(c.length, n, r)
		src := slices.Clone(in)
		dst := Filled[T](hi - lo)
		if mode == "aliased" {
			dst = src[lo:hi] // dst may be src's own chunk
		}
		if err := callMode(ctx, "ReduceScatter", async,
			func() error { return allreduce.ReduceScatter(ctx, g, dst, src, c.op) },
			func() *allreduce.Work { return allreduce.ReduceScatterAsync(ctx, g, dst, src, c.op) }); err != nil {
			return err
		}
		if err := DiffBits("chunk", dst, want); err != nil {
			return err
		}
		if mode == "aliased" {
			if err := DiffBits("src before own chunk", src[:lo], in[:lo]); err != nil {
				return err
			}
			return DiffBits("src after own chunk", src[hi:], in[hi:])
		}
		return DiffBits("src (must be unchanged)", src, in)

	case allreduce.KindAllGather:
		lo, hi := allreduce.ChunkBounds(c.length, n, r)
		global := inputs[0]
		dst := Filled[T](c.length)
		src := slices.Clone(global[lo:hi])
		if mode == "aliased" {
			copy(dst[lo:hi], src)
			src = dst[lo:hi] // src may be dst's own chunk
		}
		if err := callMode(ctx, "AllGather", async,
			func() error { return allreduce.AllGather(ctx, g, dst, src) },
			func() *allreduce.Work { return allreduce.AllGatherAsync(ctx, g, dst, src) }); err != nil {
			return err
		}
		if err := DiffBits("gathered", dst, want); err != nil {
			return err
		}
		return DiffBits("src (must be unchanged)", src, global[lo:hi])

	case allreduce.KindBroadcast:
		buf := slices.Clone(in)
		if err := callMode(ctx, "Broadcast", async,
			func() error { return allreduce.Broadcast(ctx, g, buf, root) },
			func() *allreduce.Work { return allreduce.BroadcastAsync(ctx, g, buf, root) }); err != nil {
			return err
		}
		return DiffBits("buffer", buf, want)

	case allreduce.KindReduce:
		buf := slices.Clone(in)
		if err := callMode(ctx, "Reduce", async,
			func() error { return allreduce.Reduce(ctx, g, buf, c.op, root) },
			func() *allreduce.Work { return allreduce.ReduceAsync(ctx, g, buf, c.op, root) }); err != nil {
			return err
		}
		what := "root result"
		if r != root {
			what = "non-root buffer (must be unchanged)"
		}
		return DiffBits(what, buf, want)
	}
	return fmt.Errorf("unknown collective %v", c.coll)
}

// DiffBits reports the first element where got and want differ bitwise
// (a NaN equals only the same NaN; +0 differs from -0), or nil.
func DiffBits[T allreduce.Numeric](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	gb, wb := bytesOf(got), bytesOf(want)
	if bytes.Equal(gb, wb) {
		return nil
	}
	es := len(gb) / len(got)
	first, count := -1, 0
	for i := range got {
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

// Bytes views s as its bytes (empty, not nil, for an empty s).
func Bytes[T allreduce.Numeric](s []T) []byte { return bytesOf(s) }
