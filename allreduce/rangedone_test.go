package allreduce_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// rangeLog records what a RangeDone was told, with a copy of the values
// each range held when it was reported.
type rangeLog struct {
	buf     []float32
	seen    []int // times each element was reported
	at      [][2]int
	values  [][]float32
	outside error
}

func newRangeLog(buf []float32) *rangeLog {
	return &rangeLog{buf: buf, seen: make([]int, len(buf))}
}

func (l *rangeLog) done(lo, hi int) {
	if lo < 0 || hi > len(l.buf) || lo >= hi {
		l.outside = fmt.Errorf("reported [%d, %d) of %d elements", lo, hi, len(l.buf))
		return
	}
	for i := lo; i < hi; i++ {
		l.seen[i]++
	}
	l.at = append(l.at, [2]int{lo, hi})
	l.values = append(l.values, append([]float32(nil), l.buf[lo:hi]...))
}

// check says whether every element was reported once, with the value it
// ends with.
func (l *rangeLog) check() error {
	if l.outside != nil {
		return l.outside
	}
	for i, k := range l.seen {
		if k != 1 {
			return fmt.Errorf("element %d reported %d times", i, k)
		}
	}
	for j, r := range l.at {
		if err := allreducetest.DiffBits(fmt.Sprintf("range [%d, %d) when reported", r[0], r[1]), l.values[j], l.buf[r[0]:r[1]]); err != nil {
			return err
		}
	}
	return nil
}

// TestAllReduceRanges: AllReduceRanges reports every element once, each
// range already holding its final value, and leaves bitwise what AllReduce
// leaves; the ring, halving-doubling and direct report in parts (this
// rank's chunk first, then as the all-gather brings the others), the
// others at the end. Under the race detector 4 ranks only (about 1 s).
func TestAllReduceRanges(t *testing.T) {
	ranks := []int{1, 2, 3, 4, 5}
	if raceEnabled {
		ranks = []int{4}
	}
	algos := []allreduce.Algorithm{allreduce.Ring, allreduce.HalvingDoubling, allreduce.Direct, allreduce.Doubling, allreduce.Tree}
	for _, algo := range algos {
		for _, n := range ranks {
			t.Run(fmt.Sprintf("%v/ranks=%d", algo, n), func(t *testing.T) {
				errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
					return checkRanges(g, algo, n)
				}, allreduce.WithAlgorithm(algo))
				allreducetest.RequireNoErrors(t, errs)
			})
		}
	}
}

// checkRanges is one rank of TestAllReduceRanges.
func checkRanges(g *allreduce.Group, algo allreduce.Algorithm, n int) error {
	ctx := context.Background()
	for _, count := range []int{0, 1, 7, 1001, 10007} {
		for _, op := range []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg} {
			in := allreducetest.SpecialInput[float32](uint64(count), g.Rank(), count, op)
			want := append([]float32(nil), in...)
			if err := allreduce.AllReduce(ctx, g, want, op); err != nil {
				return err
			}
			got := append([]float32(nil), in...)
			log := newRangeLog(got)
			if err := allreduce.AllReduceRanges(ctx, g, got, op, log.done); err != nil {
				return err
			}
			what := fmt.Sprintf("count %d, %v", count, op)
			if err := log.check(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if err := allreducetest.DiffBits(what, got, want); err != nil {
				return err
			}
			parts := algo == allreduce.Ring || algo == allreduce.HalvingDoubling || algo == allreduce.Direct
			if parts && n == 4 && count == 10007 && len(log.at) < 3 {
				return fmt.Errorf("%s: %d ranges reported, want this rank's chunk and the all-gather's parts", what, len(log.at))
			}
		}
	}
	return nil
}

// TestAllGatherVRanges: AllGatherVRanges over the ring reports this rank's
// chunk first, then every other chunk once, each as it arrives, and
// gathers what AllGatherV gathers; a nil RangeDone is AllGatherV.
func TestAllGatherVRanges(t *testing.T) {
	const n = 4
	counts := []int{3, 0, 5, 1}
	errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
		ctx := context.Background()
		r := g.Rank()
		src := make([]float32, counts[r])
		for i := range src {
			src[i] = float32(100*r + i)
		}
		want := make([]float32, 9)
		if err := allreduce.AllGatherV(ctx, g, want, src, counts); err != nil {
			return err
		}
		got := make([]float32, 9)
		log := newRangeLog(got)
		if err := allreduce.AllGatherVRanges(ctx, g, got, src, counts, log.done); err != nil {
			return err
		}
		if err := log.check(); err != nil {
			return err
		}
		own := 0
		for q := range r {
			own += counts[q]
		}
		if counts[r] > 0 && log.at[0] != [2]int{own, own + counts[r]} {
			return fmt.Errorf("rank %d: first range %v, want its own chunk [%d, %d)", r, log.at[0], own, own+counts[r])
		}
		nilDone := make([]float32, 9)
		if err := allreduce.AllGatherVRanges(ctx, g, nilDone, src, counts, nil); err != nil {
			return err
		}
		if err := allreducetest.DiffBits("nil RangeDone", nilDone, want); err != nil {
			return err
		}
		return allreducetest.DiffBits("gathered", got, want)
	}, allreduce.WithAlgorithm(allreduce.Ring))
	allreducetest.RequireNoErrors(t, errs)
}
