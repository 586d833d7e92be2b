package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestParseRootedSchedule: every schedule's name reads back as it; an
// unknown name is refused with the names, and so is an unknown value at
// NewGroup.
func TestParseRootedSchedule(t *testing.T) {
	for _, name := range strings.Split(allreduce.RootedScheduleNames(), ", ") {
		s, err := allreduce.ParseRootedSchedule(name)
		if err != nil || s.String() != name {
			t.Errorf("%q: %v, %v", name, s, err)
		}
	}
	if _, err := allreduce.ParseRootedSchedule("ring"); !errors.Is(err, allreduce.ErrInvalid) || !strings.Contains(err.Error(), "auto, tree, chain") {
		t.Errorf("ring: %v", err)
	}
	w, err := inproc.NewWorld(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allreduce.NewGroup(w.Endpoints()[0], allreduce.WithRootedSchedule(9)); !errors.Is(err, allreduce.ErrInvalid) || !strings.Contains(err.Error(), "RootedSchedule(9)") {
		t.Errorf("NewGroup with schedule 9: %v", err)
	}
}

// TestRootedSchedulesExact: under every schedule, Broadcast and Reduce of
// special values (±0, NaN payloads, ±Inf, the extreme integers) at awkward
// counts and every root give every rank the reference's bits, on 1 to 6
// ranks (the chain runs from 3), with a segment size that makes the chain
// pipeline several segments.
func TestRootedSchedulesExact(t *testing.T) {
	for _, s := range []allreduce.RootedSchedule{allreduce.RootedAuto, allreduce.RootedTree, allreduce.RootedChain} {
		for n := 1; n <= 6; n++ {
			var prog []allreducetest.Op
			for i, op := range allreducetest.RandomProgram(uint64(40+n), n, 400, 300) {
				if op.Kind == allreduce.KindBroadcast || op.Kind == allreduce.KindReduce {
					op.Root = i % n
					prog = append(prog, op)
				}
			}
			w, err := inproc.NewWorld(n, inproc.WithTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			outs, err := allreducetest.RunProgram(w.Endpoints(), prog, 30*time.Second,
				allreduce.WithRootedSchedule(s), allreduce.WithTuning(allreduce.Tuning{ChainSegment: 40}))
			if err != nil {
				t.Fatalf("%v, %d ranks: %v", s, n, err)
			}
			if err := allreducetest.CheckProgram(prog, outs); err != nil {
				t.Errorf("%v: %v", s, err)
			}
		}
	}
}

// TestRootedScheduleRuns: the schedule a group is given is the one that
// runs, and the formulas of Broadcast's and Reduce's schedules are the
// simulator's time (PredictRooted, within 1%): under RootedTree the
// binomial tree's, under RootedChain the chain's, under RootedAuto the
// cheaper one's, on one node and on nodes of 3 with a slower link between
// them, with one egress, one port or two, messages whole or in 64 KiB
// pieces, and a cache regime. On two ranks every schedule is the tree.
func TestRootedScheduleRuns(t *testing.T) {
	link := cost.Link{Alpha: 5e-6, Beta: 1 / 5e9, CacheBeta: 1 / 10e9, CacheBytes: 128 << 10}
	slow := cost.Link{Alpha: 20e-6, Beta: 1 / 1.25e9}
	worst := 0.0
	for _, ports := range []int{0, 1, 2} {
		for _, segment := range []int{0, 64 << 10} {
			for _, shape := range []struct{ n, local int }{{2, 0}, {3, 0}, {7, 0}, {8, 3}, {13, 0}} {
				m := cost.Model{Intra: link, Inter: link, Gamma: 1 / 8e9, Ports: ports, Segment: segment}
				s := cost.FlatShape(shape.n)
				if shape.local > 0 {
					m.Inter = slow
					s = cost.Shape{Ranks: shape.n, Nodes: (shape.n + shape.local - 1) / shape.local, LocalSize: shape.local}
				}
				for _, kind := range []allreduce.Kind{allreduce.KindBroadcast, allreduce.KindReduce} {
					for _, bytes := range []int{0, 4 << 10, 300 << 10, 8 << 20} {
						p, err := allreduce.PredictRooted(m, s, kind, bytes)
						if err != nil {
							t.Fatal(err)
						}
						want := map[allreduce.RootedSchedule]float64{allreduce.RootedTree: p.TreeSeconds, allreduce.RootedChain: p.ChainSeconds, allreduce.RootedAuto: p.TreeSeconds}
						if p.Chain {
							want[allreduce.RootedAuto] = p.ChainSeconds
						}
						if shape.n == 2 {
							want[allreduce.RootedChain] = p.TreeSeconds
						}
						for sch, w := range want {
							got, ran := simulateRooted(t, m, shape.n, shape.local, kind, sch, bytes)
							chain := shape.n > 2 && (sch == allreduce.RootedChain || sch == allreduce.RootedAuto && p.Chain)
							if wantRan := map[bool]allreduce.RootedSchedule{false: allreduce.RootedTree, true: allreduce.RootedChain}[chain]; ran != wantRan {
								t.Errorf("%d ranks, %v of %d B under %v: RootedScheduleFor says %v, want %v", shape.n, kind, bytes, sch, ran, wantRan)
							}
							e := math.Abs(got-w) / w
							worst = max(worst, e)
							if e > 0.01 {
								t.Errorf("ports %d, segment %d, %d ranks (nodes of %d), %v of %d B under %v: simulated %.2f µs, predicted %.2f (tree %.2f, chain %.2f)",
									ports, segment, shape.n, shape.local, kind, bytes, sch, got*1e6, w*1e6, p.TreeSeconds*1e6, p.ChainSeconds*1e6)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("largest difference between formula and simulator: %.4f%%", 100*worst)
}

// simulateRooted is the virtual time of one Broadcast or Reduce (root 0,
// float32 Sum) of the given bytes on n simulated ranks (on nodes of
// localSize, 0 for one node) under schedule s, and the schedule rank 0's
// group said it runs (RootedScheduleFor).
func simulateRooted(tb testing.TB, m cost.Model, n, localSize int, kind allreduce.Kind, s allreduce.RootedSchedule, bytes int) (float64, allreduce.RootedSchedule) {
	tb.Helper()
	w, err := sim.NewWorld(sim.Config{Ranks: n, LocalSize: localSize, Model: m, CollectiveBytes: allreduce.CollectiveBytes, TimingOnly: true, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	var buf []float32
	if raw := w.Buffer(bytes); len(raw) > 0 {
		buf = unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
	}
	var ran allreduce.RootedSchedule
	errs := allreducetest.RunRanks(w.Endpoints(), func(g *allreduce.Group) error {
		ctx := context.Background()
		if g.Rank() == 0 {
			ran = g.RootedScheduleFor(kind, bytes)
		}
		var err error
		if kind == allreduce.KindBroadcast {
			err = allreduce.Broadcast(ctx, g, buf, 0)
		} else {
			err = allreduce.Reduce(ctx, g, buf, allreduce.Sum, 0)
		}
		if err != nil {
			return err
		}
		return w.Conn(g.Rank()).AlignClocks(ctx) // where the cores bound applies
	}, allreduce.WithRootedSchedule(s), allreduce.WithModel(m))
	allreducetest.RequireNoErrors(tb, errs)
	return w.MaxNow(), ran
}

// TestRootedScheduleDisagreement: ranks given different schedules (or
// models that choose differently) disagree at the agreement step, which
// carries the schedule: on 3 and 5 ranks, one rank (the last, or one in
// the middle) on the tree and the others on the chain, and the reverse,
// Broadcast and Reduce of 1 MiB, the odd rank's right neighbour fails at
// once with a mismatch that names both schedules, every rank fails, and
// none hangs: a rank whose part completed before the others' aborts
// reached it (a root that only sends) fails on its next collective.
func TestRootedScheduleDisagreement(t *testing.T) {
	for _, n := range []int{3, 5} {
		for _, oddRank := range []int{n - 1, n / 2} {
			for _, odd := range []allreduce.RootedSchedule{allreduce.RootedTree, allreduce.RootedChain} {
				for _, kind := range []allreduce.Kind{allreduce.KindBroadcast, allreduce.KindReduce} {
					name := fmt.Sprintf("%d ranks, rank %d on %v, %v", n, oddRank, odd, kind)
					conns, _, err := allreducetest.InprocConns(n, 5*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					groups := make([]*allreduce.Group, n)
					for r, c := range conns {
						s := allreduce.RootedChain
						if odd == allreduce.RootedChain {
							s = allreduce.RootedTree
						}
						if r == oddRank {
							s = odd
						}
						if groups[r], err = allreduce.NewGroup(c, allreduce.WithRootedSchedule(s)); err != nil {
							t.Fatal(err)
						}
					}
					start := time.Now()
					errs := allreducetest.RunGroups(groups, func(g *allreduce.Group) error {
						ctx, cancel := allreducetest.Ctx(20 * time.Second)
						defer cancel()
						buf := make([]float32, 1<<18)
						if kind == allreduce.KindBroadcast {
							return allreduce.Broadcast(ctx, g, buf, 0)
						}
						return allreduce.Reduce(ctx, g, buf, allreduce.Sum, 0)
					})
					next := allreducetest.RunGroups(groups, func(g *allreduce.Group) error {
						ctx, cancel := allreducetest.Ctx(20 * time.Second)
						defer cancel()
						return allreduce.Barrier(ctx, g)
					})
					if d := time.Since(start); d > 4*time.Second {
						t.Errorf("%s: errors after %v (the transport's timeout is 5 s: the agreement should find it at once)", name, d)
					}
					for r, err := range errs {
						if err == nil && next[r] == nil {
							t.Errorf("%s: rank %d got no error, nor on its next collective", name, r)
						}
					}
					finder := errs[(oddRank+1)%n]
					if !errors.Is(finder, transport.ErrMismatch) || !strings.Contains(finder.Error(), "by chain") || !strings.Contains(finder.Error(), "by binomial tree") {
						t.Errorf("%s: rank %d: %v; want a mismatch naming both schedules", name, (oddRank+1)%n, finder)
					}
					for _, g := range groups {
						_ = g.Close()
					}
				}
			}
		}
	}
}
