package allreducetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
)

// The collective matrix, as an importable suite (like gonum's testblas):
// every transport's tests call Matrix with a way to connect n ranks, and
// get exactly the same cells. Inputs are small integers, so every
// reduction order gives the same value: results are compared bitwise with
// the sequential reference (reference.Reduce), which makes every rank bitwise
// identical too.

// HugeLen is the default large length of the matrix: over 1 MiB elements,
// and not a multiple of any rank count, so chunks are uneven.
const HugeLen = 1<<20 + 3

// DefaultRanks are the matrix's default rank counts.
var DefaultRanks = []int{1, 2, 3, 4, 5, 7, 8, 13, 16}

// AllOps and AllDTypes are every reduction operator and element type.
var (
	AllOps    = []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max, allreduce.Min, allreduce.Prod}
	AllDTypes = []allreduce.DType{allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64}
)

// AllCollectives are the matrix's collectives, in the order it runs them.
var AllCollectives = []allreduce.Kind{
	allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindAllGather,
	allreduce.KindBroadcast, allreduce.KindReduce, allreduce.KindBarrier,
}

// MatrixLengths is the matrix's default lengths on n ranks: {0, 1, N-1,
// N, N+1, 1000} without repeats.
func MatrixLengths(n int) []int {
	var out []int
	for _, l := range []int{0, 1, n - 1, n, n + 1, 1000} {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// AllRoots is the matrix's default roots of a Broadcast or Reduce cell:
// every rank, or at the huge length the last one.
func AllRoots(coll allreduce.Kind, n, length, hugeLen int) []int {
	if length == hugeLen {
		return []int{n - 1}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// MatrixConfig is what Matrix runs. Connect is required; every other
// field has a default.
type MatrixConfig struct {
	// Connect returns n fresh connected ranks (rank r at index r), on
	// tb's goroutine. Matrix closes them.
	Connect func(tb testing.TB, n int) []transport.Conn
	// Options are every group's options. AllReduce cells add
	// WithAlgorithm.
	Options []allreduce.GroupOption
	// Algorithms are the AllReduce algorithms, each run over the whole
	// AllReduce matrix. Default: every algorithm a group over Connect's
	// ranks can run (AlgorithmsFor), so an algorithm added to
	// the schedule table (allreduce/schedules.go) is covered without an edit here.
	Algorithms []allreduce.Algorithm
	// Collectives are the collectives to run (default AllCollectives).
	// Those other than AllReduce run once, with the default algorithm.
	Collectives []allreduce.Kind
	// Ranks are the rank counts of every collective (default
	// DefaultRanks); AllReduceRanks are more that only AllReduce runs on.
	Ranks          []int
	AllReduceRanks []int
	// Lengths are the lengths on n ranks (default MatrixLengths).
	Lengths func(n int) []int
	// Ops and DTypes default to AllOps and AllDTypes. Avg on an integer
	// type is checked to be an ErrInvalid error on every rank, sync and
	// async, on fresh ranks (it poisons the group).
	Ops    []allreduce.ReduceOp
	DTypes []allreduce.DType
	// FullRanks is the largest rank count whose lengths each run every op
	// × dtype (default 16). Above it, where a cell costs the most, each
	// length runs ThinCells cells (default 1) of a rotation, so that every
	// op and dtype still appear (given as many lengths): the i-th length
	// runs cells i·ThinCells to (i+1)·ThinCells-1, cell j being op j mod
	// len(Ops) with dtype j mod len(DTypes).
	FullRanks int
	ThinCells int
	// Huge gives the cells that also run at HugeLen: the ops (0 for
	// AllGather and Broadcast) and dtypes of coll (with algo for
	// AllReduce, Auto otherwise) on n ranks. Nil runs none; DefaultHuge
	// is the in-process choice.
	Huge    func(coll allreduce.Kind, algo allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType)
	HugeLen int // default HugeLen
	// Roots are the roots of a Broadcast or Reduce cell, run in turn on
	// the same ranks (default AllRoots).
	Roots func(coll allreduce.Kind, n, length, hugeLen int) []int
	// SyncOnly runs each cell but Barrier's once, synchronously (an Avg
	// on an integer type only in the sync form): for suites that add cells
	// (an algorithm's tuning, more rank counts, other worlds) to a matrix
	// that runs the async, repeat and aliased modes of the same
	// collectives.
	SyncOnly bool
	// Timeout bounds each cell (default a minute).
	Timeout time.Duration
	// Seed makes the inputs (default 0x5eed).
	Seed uint64
}

// DefaultHuge is the in-process matrix's huge cells: AllReduce with Direct
// (what Auto runs there) on ranks {1, 2, 3, 4, 5, 8} (Sum, and Max and
// int64 on some), Ring on 3 and 8, Auto on 4, every other algorithm once
// (5 ranks, Sum, float32); the other collectives, whose large-buffer code
// paths are the same at every rank count, on one or two. Short mode keeps
// a single cell. The huge cells dominate the matrix's time under -race.
func DefaultHuge(coll allreduce.Kind, algo allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
	sum, max := allreduce.Sum, allreduce.Max
	f32 := []allreduce.DType{allreduce.Float32}
	if testing.Short() {
		if coll == allreduce.KindAllReduce && algo == allreduce.Auto && n == 4 {
			return []allreduce.ReduceOp{sum}, f32
		}
		return nil, nil
	}
	switch coll {
	case allreduce.KindAllReduce:
		switch algo {
		case allreduce.Auto:
			if n == 4 {
				return []allreduce.ReduceOp{sum}, f32
			}
		case allreduce.Direct:
			switch n {
			case 1, 2, 4, 5:
				return []allreduce.ReduceOp{sum}, f32
			case 3:
				return []allreduce.ReduceOp{max}, []allreduce.DType{allreduce.Float32, allreduce.Int64}
			case 8:
				return []allreduce.ReduceOp{sum, max}, f32
			}
		case allreduce.Ring:
			switch n {
			case 3:
				return []allreduce.ReduceOp{sum, max}, f32
			case 8:
				return []allreduce.ReduceOp{sum}, f32
			}
		default:
			if n == 5 {
				return []allreduce.ReduceOp{sum}, f32
			}
		}
	case allreduce.KindReduceScatter:
		switch n {
		case 3:
			return []allreduce.ReduceOp{sum, max}, f32
		case 5:
			return []allreduce.ReduceOp{sum}, f32
		}
	case allreduce.KindReduce:
		if n == 5 {
			return []allreduce.ReduceOp{sum}, f32
		}
	case allreduce.KindAllGather:
		if n == 5 {
			return []allreduce.ReduceOp{0}, f32
		}
	case allreduce.KindBroadcast:
		if n == 8 {
			return []allreduce.ReduceOp{0}, f32
		}
	}
	return nil, nil
}

// Matrix runs the collective matrix of cfg: subtests
// Collective[/algorithm]/ranks=N/len=L[/op=O]/dtype=D. Each cell runs in
// every mode (sync, async and, below the huge length, a repeat and, for
// ReduceScatter and AllGather, aliased buffers; sync only with SyncOnly),
// Broadcast and Reduce from each root in turn. The cells of one subtest
// ranks=N share one set of ranks (StartRanks) until a cell fails; the next
// starts fresh ones.
func Matrix(t *testing.T, cfg MatrixConfig) {
	t.Helper()
	m := newMatrix(t, cfg)
	for _, coll := range m.cfg.Collectives {
		t.Run(coll.String(), func(t *testing.T) {
			if coll != allreduce.KindAllReduce {
				m.runCollective(t, coll, allreduce.Auto)
				return
			}
			for _, algo := range m.cfg.Algorithms {
				t.Run(algo.String(), func(t *testing.T) { m.runCollective(t, coll, algo) })
			}
		})
	}
}

// matrix is one run of Matrix: its configuration and the inputs and
// references its cells share (making them dominates small cells under
// -race).
type matrix struct {
	cfg    MatrixConfig
	inputs map[inputKey]any // [][]T by rank, grown to the largest rank count asked for
	refs   map[refKey]any   // []T
}

type inputKey struct {
	dt      allreduce.DType
	length  int
	prodish bool // Input treats only Prod specially
}

type refKey struct {
	dt        allreduce.DType
	n, length int
	op        allreduce.ReduceOp
}

func newMatrix(t *testing.T, cfg MatrixConfig) *matrix {
	if cfg.Connect == nil {
		t.Fatal("allreducetest.Matrix: MatrixConfig.Connect is nil")
	}
	if cfg.Collectives == nil {
		cfg.Collectives = AllCollectives
	}
	if cfg.Ranks == nil {
		cfg.Ranks = DefaultRanks
	}
	if cfg.Lengths == nil {
		cfg.Lengths = MatrixLengths
	}
	if cfg.Ops == nil {
		cfg.Ops = AllOps
	}
	if cfg.DTypes == nil {
		cfg.DTypes = AllDTypes
	}
	if cfg.FullRanks == 0 {
		cfg.FullRanks = 16
	}
	if cfg.ThinCells == 0 {
		cfg.ThinCells = 1
	}
	if cfg.HugeLen == 0 {
		cfg.HugeLen = HugeLen
	}
	if cfg.Roots == nil {
		cfg.Roots = AllRoots
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Seed == 0 {
		cfg.Seed = 0x5eed
	}
	if cfg.Algorithms == nil && slices.Contains(cfg.Collectives, allreduce.KindAllReduce) {
		conns := cfg.Connect(t, 1)
		cfg.Algorithms = AlgorithmsFor(conns[0], cfg.Options...)
		for _, c := range conns {
			_ = c.Close()
		}
		if len(cfg.Algorithms) == 0 {
			t.Fatal("allreducetest.Matrix: no AllReduce algorithm runs over these connections")
		}
	}
	return &matrix{cfg: cfg, inputs: map[inputKey]any{}, refs: map[refKey]any{}}
}

// cell is one cell of the matrix.
type cell struct {
	coll   allreduce.Kind
	algo   allreduce.Algorithm // AllReduce; Auto otherwise
	n      int
	length int
	op     allreduce.ReduceOp // 0 for AllGather, Broadcast and Barrier
	dt     allreduce.DType
	roots  []int // Broadcast and Reduce: run from each in turn
	huge   bool
}

func (c cell) name() string {
	if c.coll == allreduce.KindBarrier {
		return "calls=3"
	}
	s := fmt.Sprintf("len=%d", c.length)
	if c.op != 0 {
		s += "/op=" + c.op.String()
	}
	return s + "/dtype=" + c.dt.String()
}

// invalid: Avg on an integer type, an ErrInvalid error.
func (c cell) invalid() bool { return c.op == allreduce.Avg && !c.dt.IsFloat() }

func hasOp(coll allreduce.Kind) bool {
	return coll == allreduce.KindAllReduce || coll == allreduce.KindReduceScatter || coll == allreduce.KindReduce
}

func rooted(coll allreduce.Kind) bool {
	return coll == allreduce.KindBroadcast || coll == allreduce.KindReduce
}

// cells lists the cells of coll on n ranks, in subtest order.
func (m *matrix) cells(coll allreduce.Kind, algo allreduce.Algorithm, n int) []cell {
	if coll == allreduce.KindBarrier {
		return []cell{{coll: coll, n: n}}
	}
	var out []cell
	add := func(length int, ops []allreduce.ReduceOp, dts []allreduce.DType, huge, thin bool, rot int) {
		var roots []int
		if rooted(coll) {
			roots = m.cfg.Roots(coll, n, length, m.cfg.HugeLen)
		}
		one := func(op allreduce.ReduceOp, dt allreduce.DType) {
			out = append(out, cell{coll: coll, algo: algo, n: n, length: length, op: op, dt: dt, roots: roots, huge: huge})
		}
		if thin {
			for j := rot * m.cfg.ThinCells; j < (rot+1)*m.cfg.ThinCells; j++ {
				one(ops[j%len(ops)], dts[j%len(dts)])
			}
			return
		}
		for _, op := range ops {
			for _, dt := range dts {
				one(op, dt)
			}
		}
	}
	ops := []allreduce.ReduceOp{0}
	if hasOp(coll) {
		ops = m.cfg.Ops
	}
	thin := n > m.cfg.FullRanks
	for i, length := range m.cfg.Lengths(n) {
		add(length, ops, m.cfg.DTypes, false, thin, i)
	}
	if m.cfg.Huge != nil {
		if ops, dts := m.cfg.Huge(coll, algo, n); len(ops) > 0 {
			add(m.cfg.HugeLen, ops, dts, true, false, 0)
		}
	}
	return out
}

func (m *matrix) runCollective(t *testing.T, coll allreduce.Kind, algo allreduce.Algorithm) {
	ranks := m.cfg.Ranks
	if coll == allreduce.KindAllReduce {
		ranks = append(slices.Clone(ranks), m.cfg.AllReduceRanks...)
	}
	opts := m.cfg.Options
	if coll == allreduce.KindAllReduce {
		opts = append(slices.Clone(opts), allreduce.WithAlgorithm(algo))
	}
	for _, n := range ranks {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			var rs *Ranks
			defer func() {
				if rs != nil {
					rs.Close()
				}
			}()
			for _, c := range m.cells(coll, algo, n) {
				if c.invalid() {
					t.Run(c.name(), func(t *testing.T) { m.runInvalid(t, c, opts) })
					continue
				}
				job := m.job(c)
				if rs == nil {
					rs = StartRanks(m.cfg.Connect(t, n), opts...)
				}
				t.Run(c.name(), func(t *testing.T) {
					for r, err := range rs.Do(job) {
						if err != nil {
							t.Errorf("rank %d: %v", r, err)
						}
					}
				})
				if rs.Failed() {
					rs.Close()
					rs = nil
				}
			}
		})
	}
}

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
	}
	return cellJob[float32](m, c)
}

// matrixInputs is every rank's input of n ranks for op at length (rank
// r's input does not depend on n, so the largest world's serve all).
func matrixInputs[T allreduce.Numeric](m *matrix, n, length int, op allreduce.ReduceOp) [][]T {
	key := inputKey{dt: allreduce.DTypeOf[T](), length: length, prodish: op == allreduce.Prod}
	in, _ := m.inputs[key].([][]T)
	for r := len(in); r < n; r++ {
		in = append(in, reference.Input[T](m.cfg.Seed+uint64(length), r, length, op))
	}
	m.inputs[key] = in
	return in[:n]
}

func matrixRef[T allreduce.Numeric](m *matrix, inputs [][]T, length int, op allreduce.ReduceOp) []T {
	key := refKey{dt: allreduce.DTypeOf[T](), n: len(inputs), length: length, op: op}
	if v, ok := m.refs[key]; ok {
		return v.([]T)
	}
	ref := reference.Reduce(inputs, op)
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
	// The huge cells run once each way; the repeat and aliasing checks are
	// the same code at every length.
	modes := []string{"sync", "async"}
	if m.cfg.SyncOnly {
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
// in magnitude, products are ±2^k.
const sentinel = 77777

// Filled returns n copies of a value no result of the matrix's inputs
// (Input) equals, for output buffers a collective must overwrite.
func Filled[T allreduce.Numeric](n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = sentinel
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

// runInvalid checks that cell c (Avg on an integer type) is an ErrInvalid
// error on every rank, in the sync form and, on fresh ranks, the async
// one: the error poisons the group.
func (m *matrix) runInvalid(t *testing.T, c cell, opts []allreduce.GroupOption) {
	switch c.dt {
	case allreduce.Int32:
		invalidCell[int32](t, m, c, opts)
	default:
		invalidCell[int64](t, m, c, opts)
	}
}

func invalidCell[T allreduce.Numeric](t *testing.T, m *matrix, c cell, opts []allreduce.GroupOption) {
	root := 0
	if len(c.roots) > 0 {
		root = c.roots[len(c.roots)-1]
	}
	forms := []bool{false, true} // async
	if m.cfg.SyncOnly {
		forms = forms[:1]
	}
	for _, async := range forms {
		errs := RunRanks(m.cfg.Connect(t, c.n), func(g *allreduce.Group) error {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
			defer cancel()
			buf := make([]T, c.length)
			var sync func() error
			var start func() *allreduce.Work
			switch c.coll {
			case allreduce.KindAllReduce:
				sync = func() error { return allreduce.AllReduce(ctx, g, buf, c.op) }
				start = func() *allreduce.Work { return allreduce.AllReduceAsync(ctx, g, buf, c.op) }
			case allreduce.KindReduceScatter:
				lo, hi := allreduce.ChunkBounds(c.length, c.n, g.Rank())
				dst := make([]T, hi-lo)
				sync = func() error { return allreduce.ReduceScatter(ctx, g, dst, buf, c.op) }
				start = func() *allreduce.Work { return allreduce.ReduceScatterAsync(ctx, g, dst, buf, c.op) }
			case allreduce.KindReduce:
				sync = func() error { return allreduce.Reduce(ctx, g, buf, c.op, root) }
				start = func() *allreduce.Work { return allreduce.ReduceAsync(ctx, g, buf, c.op, root) }
			default:
				return fmt.Errorf("no invalid cells of %v", c.coll)
			}
			return callMode(ctx, c.coll.String(), async, sync, start)
		}, opts...)
		for r, err := range errs {
			if !errors.Is(err, allreduce.ErrInvalid) {
				t.Errorf("async=%v rank %d: %v on %v: got %v, want an error wrapping ErrInvalid", async, r, c.op, c.dt, err)
			}
		}
	}
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
