package allreducetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
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
	// HalfDTypes are the 16-bit types (default AllHalfDTypes), run
	// thinner than DTypes, as their code differs from the others' only in
	// the combine kernel and the element size: each length on n ranks runs
	// one cell of each, with op (i+n+j) mod len(Ops) for the i-th length
	// and the j-th type, so that the rank counts together run every op on
	// each; above FullRanks, only the last length runs one, of type n mod
	// 2. NoHalf runs none.
	HalfDTypes []allreduce.DType
	NoHalf     bool
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
	// thin: the race subset (Thin); hugeRan marks the collectives and
	// algorithms whose huge cell it ran.
	thin    bool
	hugeRan map[cellKind]bool
}

// cellKind is a collective and its algorithm.
type cellKind struct {
	coll allreduce.Kind
	algo allreduce.Algorithm
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
	if cfg.HalfDTypes == nil && !cfg.NoHalf {
		cfg.HalfDTypes = AllHalfDTypes
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
	m := &matrix{cfg: cfg, inputs: map[inputKey]any{}, refs: map[refKey]any{}, thin: Thin(), hugeRan: map[cellKind]bool{}}
	if m.thin {
		m.cfg.FullRanks = min(m.cfg.FullRanks, raceFullRanks)
	}
	return m
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
