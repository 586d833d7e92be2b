package allreduce_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestWorkMatchesSimulator: the work each formula counts (cost.Work) is
// the work the simulator counts for the same schedule. With no latency
// (α = 0) every schedule's critical path is a chain of its own transfers
// and reductions, so on one node with one core (Model.Cores = 1,
// sim.Config.Cores = 1) both times are exactly the work: the formulas'
// bound and the simulator's AlignClocks bound agree to rounding, for every
// algorithm the simulator runs and Broadcast's and Reduce's schedules, on
// 2 to 8 ranks (odd counts: the fold), with ports or not, messages whole
// or in pieces, 0 bytes to 4 MiB (sizes not divisible by N). Work is at
// the link's large-message rate whatever the size regime (messages up to
// 64 KiB here move 4 times faster: that is the critical path's, not the
// work's), so pieces and segments of unequal sizes cost the sum of their
// bytes, as the formulas count them. With Model.ExchangeWork 0.6 the bytes
// of pairwise exchanges (doubling's and halving-doubling's steps, the
// ring's on 2 ranks) cost 0.6 of a one-way byte's in both.
func TestWorkMatchesSimulator(t *testing.T) {
	l := cost.Link{Beta: 1 / 5e9, CacheBeta: 1 / 20e9, CacheBytes: 64 << 10}
	base := cost.Model{Intra: l, Inter: l, Gamma: 1 / 8e9, Cores: 1}
	for _, n := range []int{2, 3, 4, 5, 8} {
		for i, ports := range []int{0, 2} {
			for j, seg := range []int{0, 64 << 10} {
				m := base
				m.Ports, m.Segment = ports, seg
				if i != j {
					m.ExchangeWork = 0.6
				}
				if n%2 == 1 { // and the cache-work regime, below 1 MiB + 12
					m.CacheWork, m.CacheWorkBytes = 0.9, 1<<20+12
				}
				shape := cost.FlatShape(n)
				for _, bytes := range []int{0, 4, 12 << 10, 1<<20 + 12, 4 << 20} {
					name := fmt.Sprintf("n=%d/ports=%d/seg=%d/exchange=%g/cache=%g/%d", n, ports, seg, m.ExchangeWork, m.CacheWork, bytes)
					for _, a := range []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.Tree, allreduce.HalvingDoubling} {
						want, _ := allreduce.PredictAlgorithm(m, shape, a, bytes)
						got := simulate(t, m, n, 0, a, bytes)
						tol := 1e-9
						if m.ExchangeWork != 0 && bytes%(1<<10) != 0 {
							// The halves of an exchange can go in different
							// numbers of pieces; a send piece past the
							// receive's goes alone, one way (pieces.go),
							// where the formulas count the average.
							tol = 0.02
						}
						if math.Abs(got-want) > tol*max(got, 1e-12) {
							t.Errorf("%s/%v: simulated %.4f µs, the cores bound says %.4f µs", name, a, got*1e6, want*1e6)
						}
					}
					for _, kind := range []allreduce.Kind{allreduce.KindBroadcast, allreduce.KindReduce} {
						for _, sch := range []allreduce.RootedSchedule{allreduce.RootedTree, allreduce.RootedChain} {
							if sch == allreduce.RootedChain && n < 3 {
								continue
							}
							p, err := allreduce.PredictRooted(m, shape, kind, bytes)
							if err != nil {
								t.Fatal(err)
							}
							want := p.TreeSeconds
							if sch == allreduce.RootedChain {
								want = p.ChainSeconds
							}
							got, _ := simulateRooted(t, m, n, 0, kind, sch, bytes)
							if math.Abs(got-want) > 1e-9*max(got, 1e-12) {
								t.Errorf("%s/%v by %v: simulated %.4f µs, the cores bound says %.4f µs", name, kind, sch, got*1e6, want*1e6)
							}
						}
					}
				}
			}
		}
	}
}

// TestCoresBoundOnNodes: on several nodes the formulas' bound (the busiest
// node's work: the compositions add their phases' busiest nodes) and the
// simulator's (each node's own) agree, and the predictions stay within
// TestCostMatchesSimulator's tolerances of the simulated times (3.5%: the
// ring's longest path on two kinds of link with ports is 3.2% off on 8
// ranks, with or without the bound; torus and mesh on uneven nodes with
// TestCostUnevenNodes's): every algorithm, 8 ranks on nodes of 4, 10 on
// nodes of 4 (the last node smaller), 12 on nodes of 3, with two cores a
// node, exchanged bytes at 0.8 of a one-way byte's work, links within a
// node 10 times those between, 4 KiB to 4 MiB.
func TestCoresBoundOnNodes(t *testing.T) {
	m := cost.Model{
		Intra: cost.Link{Alpha: 1e-6, Beta: 1 / 100e9},
		Inter: cost.Link{Alpha: 5e-6, Beta: 1 / 10e9},
		Gamma: 1 / 20e9, Ports: 2, Cores: 2, ExchangeWork: 0.8,
	}
	for _, tc := range []struct{ n, local int }{{8, 4}, {10, 4}, {12, 3}} {
		shape := cost.NodesShape(tc.n, tc.local)
		for _, p := range allreduce.Predict(m, shape, 0) {
			for _, bytes := range []int{4 << 10, 256 << 10, 4 << 20} {
				want, _ := allreduce.PredictAlgorithm(m, shape, p.Algorithm, bytes)
				got := simulate(t, m, tc.n, tc.local, p.Algorithm, bytes)
				tol := 0.035
				switch {
				case p.Algorithm == allreduce.Hierarchical:
					tol = 0.11
				case tc.n%tc.local != 0 && p.Algorithm == allreduce.Torus:
					tol = 0.18 // TestCostUnevenNodes
				case tc.n%tc.local != 0 && p.Algorithm == allreduce.Mesh:
					tol = 0.10
				}
				if math.Abs(got-want) > tol*got {
					t.Errorf("n=%d/local=%d/%v/%d: simulated %.2f µs, the formula says %.2f µs (%+.1f%%, tolerance %.0f%%)", tc.n, tc.local, p.Algorithm, bytes, got*1e6, want*1e6, 100*(want-got)/got, 100*tol)
				}
			}
		}
	}
}
