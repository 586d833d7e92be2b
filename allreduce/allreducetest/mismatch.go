package allreducetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/numeric"
)

// The mismatch check: ranks call different collectives (kind, count, dtype,
// op or root), and every rank must get an error — from the mismatched call
// or, for a rank whose part of it finished, from the next call — that
// names the two calls that disagree with the ranks that made them, never
// another rank's call as its own, and never a bare "connection lost" or
// withdrawal in place of the cause.

// Soak reports whether the long runs were asked for (RINGDDP_SOAK=1):
// tests then run the full trial counts of the goals instead of the CI
// sample.
func Soak() bool { return os.Getenv("RINGDDP_SOAK") == "1" }

// MismatchCase is one trial: every rank calls Base except the ranks in
// Odd, which call Other. A matching AllReduce comes first (so the mismatch
// is not at sequence number 0) and a Barrier after.
type MismatchCase struct {
	Name        string
	Base, Other Op
	Odd         []int
}

func (m MismatchCase) String() string { return fmt.Sprintf("%s/odd=%v", m.Name, m.Odd) }

// MismatchCases is the matrix for n ranks (n ≥ 2): the base calls differ
// from the odd ones in one of kind, count, dtype, op and root, at counts
// that take every algorithm's paths (0, small, and past the 64 KiB where
// Auto leaves recursive doubling), with the odd call on the last, the first
// or a middle rank, or on every rank but 0.
func MismatchCases(n int) []MismatchCase {
	ar := func(dt allreduce.DType, count int, op allreduce.ReduceOp) Op {
		return Op{Kind: allreduce.KindAllReduce, DType: dt, Op: op, Root: -1, Count: count}
	}
	f32, f64, i32, i64 := allreduce.Float32, allreduce.Float64, allreduce.Int32, allreduce.Int64
	sum, max := allreduce.Sum, allreduce.Max
	kind := func(k allreduce.Kind, dt allreduce.DType, count, root int, op allreduce.ReduceOp) Op {
		return Op{Kind: k, DType: dt, Op: op, Root: root, Count: count}
	}
	type pair struct {
		name        string
		base, other Op
	}
	pairs := []pair{
		{"count", ar(f32, 5, sum), ar(f32, 6, sum)},
		{"count-zero", ar(f32, 0, sum), ar(f32, 5, sum)},
		{"count-large", ar(f64, 30000, max), ar(f64, 30001, max)},
		{"dtype", ar(f32, 7, sum), ar(f64, 7, sum)},
		{"dtype-same-size", ar(f32, 9, sum), ar(i32, 9, sum)},
		{"dtype-16bit", ar(allreduce.Float16, 9, sum), ar(allreduce.BFloat16, 9, sum)},
		{"dtype-16bit-size", ar(allreduce.BFloat16, 9, sum), ar(f32, 9, sum)},
		{"op", ar(i64, 4, sum), ar(i64, 4, max)},
		{"op-large", ar(f32, 20000, sum), ar(f32, 20000, max)},
		{"kind-broadcast", ar(f32, 8, sum), kind(allreduce.KindBroadcast, f32, 8, 0, 0)},
		{"kind-reduce", ar(i64, 64, sum), kind(allreduce.KindReduce, i64, 64, 0, sum)},
		{"kind-reducescatter", ar(f64, 30, sum), kind(allreduce.KindReduceScatter, f64, 30, -1, sum)},
		{"kind-allgather", kind(allreduce.KindReduceScatter, f64, 30, -1, sum), kind(allreduce.KindAllGather, f64, 30, -1, 0)},
		{"kind-barrier", ar(i32, 5, max), kind(allreduce.KindBarrier, 0, 0, -1, 0)},
		{"broadcast-dtype", kind(allreduce.KindBroadcast, i64, 100, 0, 0), kind(allreduce.KindBroadcast, f64, 100, 0, 0)},
		{"broadcast-root", kind(allreduce.KindBroadcast, f32, 8, 0, 0), kind(allreduce.KindBroadcast, f32, 8, n-1, 0)},
		{"reduce-root", kind(allreduce.KindReduce, f32, 8, 0, sum), kind(allreduce.KindReduce, f32, 8, 1, sum)},
		{"allgather-count", kind(allreduce.KindAllGather, i32, 3*n, -1, 0), kind(allreduce.KindAllGather, i32, 3*n+1, -1, 0)},
	}
	odds := [][]int{{n - 1}, {0}, {n / 2}}
	if n > 2 {
		all := make([]int, 0, n-1)
		for r := 1; r < n; r++ {
			all = append(all, r)
		}
		odds = append(odds, all)
	}
	var out []MismatchCase
	for _, p := range pairs {
		for _, odd := range odds {
			out = append(out, MismatchCase{Name: p.name, Base: p.base, Other: p.other, Odd: odd})
		}
	}
	return out
}

// callOf is the op rank r calls in trial m.
func (m MismatchCase) callOf(r int) Op {
	for _, o := range m.Odd {
		if o == r {
			return m.Other
		}
	}
	return m.Base
}

var warmUp = Op{Kind: allreduce.KindAllReduce, DType: allreduce.Float32, Op: allreduce.Sum, Root: -1, Count: 1}
var barrierOp = Op{Kind: allreduce.KindBarrier, Root: -1}

// RunMismatch runs trial m on conns and returns each rank's first error:
// that of the mismatched call or, if it returned nil, that of the Barrier
// after it.
func RunMismatch(conns []transport.Conn, m MismatchCase, timeout time.Duration, opts ...allreduce.GroupOption) []error {
	return RunRanks(conns, func(g *allreduce.Group) error {
		ctx, cancel := Ctx(timeout)
		defer cancel()
		if _, err := dispatch(ctx, g, warmUp); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := dispatch(ctx, g, m.callOf(g.Rank())); err != nil {
			return err
		}
		_, err := dispatch(ctx, g, barrierOp)
		return err
	}, opts...)
}

func dispatch(ctx context.Context, g *allreduce.Group, o Op) ([]byte, error) {
	switch o.DType {
	case allreduce.Float32:
		return runOp[float32](ctx, g, o)
	case allreduce.Float64:
		return runOp[float64](ctx, g, o)
	case allreduce.Int32:
		return runOp[int32](ctx, g, o)
	case allreduce.Int64:
		return runOp[int64](ctx, g, o)
	case allreduce.Float16:
		return runOp[numeric.Float16](ctx, g, o)
	case allreduce.BFloat16:
		return runOp[numeric.BFloat16](ctx, g, o)
	}
	return nil, allreduce.Barrier(ctx, g)
}

// header is the header rank r's call of o carries at sequence seq (Step
// and Group aside).
func (o Op) header(seq uint64) transport.Header {
	h := transport.Header{Seq: seq, Kind: uint8(o.Kind), DType: uint8(o.DType), Root: -1, Count: int64(o.Count)}
	switch o.Kind {
	case allreduce.KindAllReduce, allreduce.KindReduceScatter:
		h.Op = uint8(o.Op)
	case allreduce.KindReduce:
		h.Op, h.Root = uint8(o.Op), int32(o.Root)
	case allreduce.KindBroadcast:
		h.Root = int32(o.Root)
	}
	return h
}

// expectedHeader is the header of rank r's call number seq in trial m.
func (m MismatchCase) expectedHeader(r int, seq uint64) (transport.Header, bool) {
	switch seq {
	case 0:
		return warmUp.header(0), true
	case 1:
		return m.callOf(r).header(1), true
	case 2:
		return barrierOp.header(2), true
	}
	return transport.Header{}, false
}

func sameCall(a, b transport.Header) bool {
	a.Step, b.Step, a.Group, b.Group = 0, 0, 0, 0
	return a == b
}

// CheckMismatch checks every rank's error of trial m (see RunMismatch).
func CheckMismatch(m MismatchCase, errs []error) error {
	for r, err := range errs {
		if err := checkRankMismatch(m, r, err); err != nil {
			return fmt.Errorf("%v, rank %d: %w", m, r, err)
		}
	}
	return nil
}

func checkRankMismatch(m MismatchCase, r int, err error) error {
	if err == nil {
		return errors.New("no error")
	}
	text := err.Error()
	if !errors.Is(err, transport.ErrMismatch) {
		return fmt.Errorf("not a mismatch: %v", err)
	}
	var mm *transport.MismatchError
	if !errors.As(err, &mm) {
		return fmt.Errorf("no *transport.MismatchError (ranks and calls lost): %v", err)
	}
	for _, side := range []struct {
		rank int
		h    transport.Header
	}{{mm.Rank, mm.Local}, {mm.Peer, mm.Remote}} {
		want, ok := m.expectedHeader(side.rank, side.h.Seq)
		if !ok || !sameCall(side.h, want) {
			return fmt.Errorf("blames rank %d for %s, but it called %s: %v", side.rank,
				allreduce.DescribeCall(side.h), allreduce.DescribeCall(want), err)
		}
	}
	if sameCall(mm.Local, mm.Remote) && mm.LocalBytes == mm.RemoteBytes && mm.Local.Step == mm.Remote.Step {
		return fmt.Errorf("the two sides of the mismatch agree: %v", err)
	}
	for _, h := range []transport.Header{mm.Local, mm.Remote} {
		if !strings.Contains(text, allreduce.DescribeCall(h)) {
			return fmt.Errorf("does not name %s: %v", allreduce.DescribeCall(h), err)
		}
	}
	own := fmt.Sprintf("rank %d called ", r)
	if mm.Involves(r) {
		mine, _ := mm.From(r)
		if !strings.Contains(text, own+allreduce.DescribeCall(mine.Local)) {
			return fmt.Errorf("does not say this rank called %s: %v", allreduce.DescribeCall(mine.Local), err)
		}
	} else if strings.Contains(text, "allreduce: "+own) {
		return fmt.Errorf("reports another pair's mismatch as its own: %v", err)
	}
	for _, bad := range []string{"connection lost", "withdrew"} {
		if strings.Contains(text, bad) {
			return fmt.Errorf("%q in place of the cause: %v", bad, err)
		}
	}
	return nil
}
