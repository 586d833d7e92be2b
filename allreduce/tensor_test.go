package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/run/reference"
	"github.com/ringddp/ringddp/numeric"
)

// The tensor collectives are checked against the sequential reference
// (reference.Reduce) on tensors of 5×7 elements (a count no rank count
// divides) laid out four ways, mixed across ranks, and on scalars. A
// tensor's logical contents are read element by element with At, which
// shares no code with the collectives' gather and scatter.

const tensorRows, tensorCols = 5, 7

// tensorSentinel fills backing-array elements outside a view: no input or result
// equals it, so a collective that wrote outside the view is caught.
const tensorSentinel = 4321

// tensorLayout places a rows×cols matrix of logical values in a tensor.
type tensorLayout[T numeric.Arith] struct {
	name     string
	iterator bool // the tensor needs an iterator (not contiguous)
	// make returns the tensor holding vals and its backing array, whose
	// elements outside the tensor are tensorSentinel.
	make func(vals []T) (*tensor.Dense, []T)
}

func tensorLayouts[T numeric.Arith]() []tensorLayout[T] {
	const rows, cols = tensorRows, tensorCols
	return []tensorLayout[T]{
		{"contiguous", false, func(vals []T) (*tensor.Dense, []T) {
			backing := slices.Clone(vals)
			return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(backing)), backing
		}},
		{"transposed", true, func(vals []T) (*tensor.Dense, []T) {
			backing := make([]T, rows*cols) // cols×rows, the transpose of vals
			for i := range rows {
				for j := range cols {
					backing[j*rows+i] = vals[i*cols+j]
				}
			}
			d := tensor.New(tensor.WithShape(cols, rows), tensor.WithBacking(backing))
			if err := d.T(); err != nil {
				panic(err)
			}
			return d, backing
		}},
		{"column slice", true, func(vals []T) (*tensor.Dense, []T) {
			backing := make([]T, rows*(cols+3)) // columns 1..cols of rows×(cols+3)
			for i := range backing {
				backing[i] = tensorSentinel
			}
			for i := range rows {
				copy(backing[i*(cols+3)+1:], vals[i*cols:(i+1)*cols])
			}
			parent := tensor.New(tensor.WithShape(rows, cols+3), tensor.WithBacking(backing))
			v, err := parent.Slice(nil, tensor.S(1, cols+1))
			if err != nil {
				panic(err)
			}
			return v.(*tensor.Dense), backing
		}},
		{"row slice", false, func(vals []T) (*tensor.Dense, []T) {
			backing := make([]T, (rows+2)*cols) // rows 1..rows of (rows+2)×cols: contiguous, offset
			for i := range backing {
				backing[i] = tensorSentinel
			}
			copy(backing[cols:], vals)
			parent := tensor.New(tensor.WithShape(rows+2, cols), tensor.WithBacking(backing))
			v, err := parent.Slice(tensor.S(1, rows+1))
			if err != nil {
				panic(err)
			}
			return v.(*tensor.Dense), backing
		}},
	}
}

// tensorLogical reads d's rows×cols logical contents with At.
func tensorLogical[T numeric.Arith](d *tensor.Dense) ([]T, error) {
	if s := d.Shape(); len(s) != 2 || s[0] != tensorRows || s[1] != tensorCols {
		return nil, fmt.Errorf("shape %v", s)
	}
	out := make([]T, 0, tensorRows*tensorCols)
	for i := range tensorRows {
		for j := range tensorCols {
			v, err := d.At(i, j)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(T))
		}
	}
	return out, nil
}

// tensorSentinels counts backing's tensorSentinel elements.
func tensorSentinels[T numeric.Arith](backing []T) int {
	n := 0
	for _, x := range backing {
		if x == tensorSentinel {
			n++
		}
	}
	return n
}

// tensorRank is one rank's tensor: made in a layout from its input, checked
// against the expected logical contents afterwards.
type tensorRank[T numeric.Arith] struct {
	layout  tensorLayout[T]
	d       *tensor.Dense
	backing []T
	outside int // tensorSentinel elements outside the tensor
}

func newTensorRank[T numeric.Arith](l tensorLayout[T], in []T) (*tensorRank[T], error) {
	d, backing := l.make(in)
	if d.RequiresIterator() != l.iterator {
		return nil, fmt.Errorf("%s: RequiresIterator %v, the test assumes %v", l.name, d.RequiresIterator(), l.iterator)
	}
	if got, err := tensorLogical[T](d); err != nil || !slices.Equal(got, in) {
		return nil, fmt.Errorf("%s: made %v (%v), want %v", l.name, got, err, in)
	}
	return &tensorRank[T]{layout: l, d: d, backing: backing, outside: tensorSentinels(backing)}, nil
}

// check compares the tensor's logical contents with want and checks that
// nothing outside it changed.
func (r *tensorRank[T]) check(want []T) error {
	got, err := tensorLogical[T](r.d)
	if err != nil {
		return fmt.Errorf("%s: %w", r.layout.name, err)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: got %v, want %v", r.layout.name, got, want)
	}
	if n := tensorSentinels(r.backing); n != r.outside {
		return fmt.Errorf("%s: %d elements outside the tensor changed", r.layout.name, r.outside-n)
	}
	return nil
}

// tensorOps are the reductions checked for T: Avg for floats only.
func tensorOps[T numeric.Arith]() []allreduce.ReduceOp {
	ops := []allreduce.ReduceOp{allreduce.Sum, allreduce.Prod, allreduce.Max, allreduce.Min}
	if allreduce.DTypeOf[T]().IsFloat() {
		ops = append(ops, allreduce.Avg)
	}
	return ops
}

// runTensorCase runs one collective on n ranks whose layouts are layouts
// shifted by shift, rank r starting from inputs[r], and checks rank r's
// tensor against want(r).
func runTensorCase[T numeric.Arith](n, shift int, inputs [][]T, want func(r int) []T,
	coll func(ctx context.Context, g *allreduce.Group, d *tensor.Dense) error) error {
	layouts := tensorLayouts[T]()
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		tr, err := newTensorRank(layouts[(r+shift)%len(layouts)], inputs[r])
		if err != nil {
			return err
		}
		ctx, cancel := allreducetest.Ctx(10 * time.Second)
		defer cancel()
		if err := coll(ctx, g, tr.d); err != nil {
			return err
		}
		return tr.check(want(r))
	})
	return allreducetest.FirstError(errs)
}

func testTensorCollectives[T numeric.Arith](t *testing.T) {
	const size = tensorRows * tensorCols
	for n := 1; n <= 4; n++ {
		for shift := range tensorLayouts[T]() {
			for _, op := range tensorOps[T]() {
				inputs := make([][]T, n)
				for r := range inputs {
					inputs[r] = reference.Input[T](uint64(shift), r, size, op)
				}
				ref := reference.Reduce(inputs, op)
				name := fmt.Sprintf("ranks=%d/shift=%d/%v", n, shift, op)

				err := runTensorCase(n, shift, inputs, func(int) []T { return ref },
					func(ctx context.Context, g *allreduce.Group, d *tensor.Dense) error {
						return allreduce.AllReduceTensor(ctx, g, d, op)
					})
				if err != nil {
					t.Errorf("AllReduceTensor %s: %v", name, err)
				}

				err = runTensorCase(n, shift, inputs, func(int) []T { return ref },
					func(ctx context.Context, g *allreduce.Group, d *tensor.Dense) error {
						return allreduce.AllReduceTensorAsync(ctx, g, d, op).Wait(ctx)
					})
				if err != nil {
					t.Errorf("AllReduceTensorAsync %s: %v", name, err)
				}

				root := (shift + 1) % n
				err = runTensorCase(n, shift, inputs, func(r int) []T {
					if r == root {
						return ref
					}
					return inputs[r] // Reduce leaves other ranks' tensors as they were
				}, func(ctx context.Context, g *allreduce.Group, d *tensor.Dense) error {
					return allreduce.ReduceTensor(ctx, g, d, op, root)
				})
				if err != nil {
					t.Errorf("ReduceTensor %s root=%d: %v", name, root, err)
				}
			}
			inputs := make([][]T, n)
			for r := range inputs {
				inputs[r] = reference.Input[T](uint64(shift), r, size, allreduce.Sum)
			}
			root := n - 1
			err := runTensorCase(n, shift, inputs, func(int) []T { return inputs[root] },
				func(ctx context.Context, g *allreduce.Group, d *tensor.Dense) error {
					return allreduce.BroadcastTensor(ctx, g, d, root)
				})
			if err != nil {
				t.Errorf("BroadcastTensor ranks=%d/shift=%d root=%d: %v", n, shift, root, err)
			}
		}
	}
}

// Scalars: a scalar tensor, and a scalar view of a matrix element, which
// is written back into the matrix and nowhere else.
func testTensorScalars[T numeric.Arith](t *testing.T) {
	for n := 1; n <= 4; n++ {
		errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
			ctx, cancel := allreducetest.Ctx(10 * time.Second)
			defer cancel()
			r := g.Rank()
			want := T(n * (n + 1) / 2)

			s := tensor.New(tensor.FromScalar(T(r + 1)))
			if err := allreduce.AllReduceTensor(ctx, g, s, allreduce.Sum); err != nil {
				return err
			}
			if got := s.ScalarValue().(T); got != want {
				return fmt.Errorf("scalar: got %v, want %v", got, want)
			}

			backing := []T{tensorSentinel, tensorSentinel, tensorSentinel, tensorSentinel, tensorSentinel, T(r + 1)}
			m := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(backing))
			v, err := m.Slice(tensor.S(1), tensor.S(2))
			if err != nil {
				return err
			}
			if !v.IsScalar() {
				return fmt.Errorf("m[1, 2] has shape %v, want a scalar", v.Shape())
			}
			if err := allreduce.AllReduceTensorAsync(ctx, g, v, allreduce.Max).Wait(ctx); err != nil {
				return err
			}
			if want := []T{tensorSentinel, tensorSentinel, tensorSentinel, tensorSentinel, tensorSentinel, T(n)}; !slices.Equal(backing, want) {
				return fmt.Errorf("scalar view: matrix %v, want %v", backing, want)
			}
			return nil
		})
		if err := allreducetest.FirstError(errs); err != nil {
			t.Errorf("ranks=%d: %v", n, err)
		}
	}
}

func testTensorType[T numeric.Arith](t *testing.T) {
	t.Run("collectives", testTensorCollectives[T])
	t.Run("scalars", testTensorScalars[T])
}

func TestTensorFloat32(t *testing.T) { testTensorType[float32](t) }
func TestTensorFloat64(t *testing.T) { testTensorType[float64](t) }
func TestTensorInt32(t *testing.T)   { testTensorType[int32](t) }
func TestTensorInt64(t *testing.T)   { testTensorType[int64](t) }

// An asynchronous tensor collective takes its place in the group's order
// when it is called, like AllReduceAsync: a collective called right after
// it, before it completes, comes after it on every rank. Several are in
// flight at once, views and contiguous tensors mixed.
func TestTensorAsyncOrder(t *testing.T) {
	const rounds = 20
	for n := 2; n <= 4; n++ {
		errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
			ctx, cancel := allreducetest.Ctx(10 * time.Second)
			defer cancel()
			r := g.Rank()
			layouts := tensorLayouts[float32]()
			var works []*allreduce.Work
			var ranks []*tensorRank[float32]
			var refs [][]float32
			for i := range rounds {
				size := tensorRows * tensorCols
				inputs := make([][]float32, n)
				for q := range inputs {
					inputs[q] = reference.Input[float32](uint64(i), q, size, allreduce.Sum)
				}
				tr, err := newTensorRank(layouts[(r+i)%len(layouts)], inputs[r])
				if err != nil {
					return err
				}
				works = append(works, allreduce.AllReduceTensorAsync(ctx, g, tr.d, allreduce.Sum))
				ranks = append(ranks, tr)
				refs = append(refs, reference.Reduce(inputs, allreduce.Sum))

				// A synchronous collective of another count and dtype between
				// the asynchronous ones: a rank that issued them in another
				// order would get a mismatch error.
				plain := []int64{int64(r), int64(i)}
				if err := allreduce.AllReduce(ctx, g, plain, allreduce.Max); err != nil {
					return err
				}
				if plain[0] != int64(n-1) || plain[1] != int64(i) {
					return fmt.Errorf("round %d: plain all-reduce got %v", i, plain)
				}
			}
			if err := allreduce.WaitAll(ctx, works...); err != nil {
				return err
			}
			for i, tr := range ranks {
				if err := tr.check(refs[i]); err != nil {
					return fmt.Errorf("round %d: %w", i, err)
				}
			}
			return nil
		})
		if err := allreducetest.FirstError(errs); err != nil {
			t.Errorf("ranks=%d: %v", n, err)
		}
	}
}

// A tensor that is not a *tensor.Dense of a supported dtype is refused on
// the calling rank before any communication, so it takes no place in the
// group's order: the next collective still matches on every rank.
func TestTensorInvalid(t *testing.T) {
	var nilDense *tensor.Dense
	bad := []struct {
		name string
		t    tensor.Tensor
		want string
	}{
		{"nil", nil, "tensor of type <nil>"},
		{"nil *Dense", nilDense, "tensor of type *tensor.Dense"},
		{"int", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2})), "tensor dtype int (want float32, float64, int32 or int64)"},
		{"uint8", tensor.New(tensor.WithShape(2), tensor.WithBacking([]uint8{1, 2})), "tensor dtype uint8"},
		{"sparse", tensor.CSRFromCoord(tensor.Shape{2, 2}, []int{0}, []int{1}, []float32{1}), "tensor of type *tensor.CS"},
	}
	errs := allreducetest.RunInproc(2, 10*time.Second, func(g *allreduce.Group) error {
		ctx, cancel := allreducetest.Ctx(10 * time.Second)
		defer cancel()
		for _, b := range bad {
			for what, err := range map[string]error{
				"AllReduceTensor":      allreduce.AllReduceTensor(ctx, g, b.t, allreduce.Sum),
				"BroadcastTensor":      allreduce.BroadcastTensor(ctx, g, b.t, 0),
				"ReduceTensor":         allreduce.ReduceTensor(ctx, g, b.t, allreduce.Sum, 0),
				"AllReduceTensorAsync": allreduce.AllReduceTensorAsync(ctx, g, b.t, allreduce.Sum).Wait(ctx),
			} {
				if !errors.Is(err, allreduce.ErrInvalid) || err == nil || !strings.Contains(err.Error(), b.want) {
					return fmt.Errorf("%s(%s): %v, want ErrInvalid saying %q", what, b.name, err, b.want)
				}
			}
		}
		buf := []float64{float64(g.Rank())}
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil || buf[0] != 1 {
			return fmt.Errorf("the next collective: %v, %v", buf, err)
		}
		return nil
	})
	if err := allreducetest.FirstError(errs); err != nil {
		t.Error(err)
	}
}
