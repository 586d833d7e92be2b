package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// The two links of a calibration across nodes (-nnodes > 1): the ring of
// every rank crosses the slow link between nodes on some of its steps and
// so times neither link, so -calibrate times each alone, one ring after
// another, every process taking part in the same order:
//
//  1. intra: each node's ranks in a ring among themselves, every node at
//     once (over -transport auto, shared memory; over tcp, the host's
//     loopback): the model's Intra link; its reducing steps give γ;
//  2. inter: one rank of each node (local rank 0) in a ring over the
//     nodes, the other ranks idle: the model's Inter link, one message
//     per NIC;
//  3. inter, all: every local rank i in a ring over the nodes' local ranks
//     i, all at once, at the large sizes: how the node's ranks share its
//     link (Model.NICs, fitNICs).
//
// Nodes are blocks of LocalSize consecutive ranks (the launchers' ranks,
// cost.Shape.NodeOfRank).

// The header Groups of the rings (the reducing steps use each one's + 1).
const (
	intraGroup    = pingGroup + 2
	interGroup    = pingGroup + 4
	interAllGroup = pingGroup + 6
)

// interStream is the rings between nodes' exchangeRing.stream: 4 MiB a
// round, past the burst of a token bucket at the rates these links have
// (the test bed's is 5 ms of its rate: 625 KB at 1 Gbit/s).
const interStream = 4 << 20

// intraRing is the ring of each node's ranks among themselves; a node of
// one rank takes no part.
func intraRing(s cost.Shape) exchangeRing {
	return exchangeRing{group: intraGroup, peers: func(r, n int) (int, int, bool) {
		base := s.NodeOfRank(r) * s.LocalSize
		size := min(s.LocalSize, n-base)
		if size < 2 {
			return 0, 0, false
		}
		i := r - base
		return base + (i+1)%size, base + (i+size-1)%size, true
	}}
}

// interRing is the ring over the nodes of their local ranks i: of local
// rank 0 alone (all false), or of every local rank i at once (all), each
// over the nodes that have one.
func interRing(s cost.Shape, all bool) exchangeRing {
	group := uint32(interGroup)
	if all {
		group = interAllGroup
	}
	return exchangeRing{group: group, stream: interStream, peers: func(r, n int) (int, int, bool) {
		i := r - s.NodeOfRank(r)*s.LocalSize
		if i > 0 && !all {
			return 0, 0, false
		}
		var ring []int // local rank i of every node that has one
		for k := 0; k*s.LocalSize+i < n; k++ {
			ring = append(ring, k*s.LocalSize+i)
		}
		if len(ring) < 2 {
			return 0, 0, false
		}
		for j, x := range ring {
			if x == r {
				return ring[(j+1)%len(ring)], ring[(j+len(ring)-1)%len(ring)], true
			}
		}
		return 0, 0, false
	}}
}

// linkTimes are the rings' per-step times (rank 0's process; nil
// elsewhere): intra and its reducing steps at the large sizes (nil where
// every node has one rank), inter, and interAll at the large sizes.
type linkTimes struct {
	intra, intraReduced, inter, interReduced, interAll []float64
	// notes are the rings' lines on their rounds' paces (paces.go).
	notes string
}

// measureLinks times the rings of a calibration across the nodes of s.
func measureLinks(ctx context.Context, cfg *config, conns []transport.Conn, s cost.Shape, sizes, large []int) (linkTimes, error) {
	var t linkTimes
	var err error
	for _, step := range []struct {
		what   string
		out    *[]float64
		sizes  []int
		reduce bool
		ring   exchangeRing
		skip   bool
	}{
		{"the ring within each node", &t.intra, sizes, false, intraRing(s), s.LocalSize < 2},
		{"the ring within each node, reducing", &t.intraReduced, large, true, intraRing(s), s.LocalSize < 2},
		{"the ring between nodes", &t.inter, sizes, false, interRing(s, false), false},
		{"the ring between nodes, reducing", &t.interReduced, large, true, interRing(s, false), s.LocalSize >= 2},
		{"the rings between nodes of every local rank", &t.interAll, large, false, interRing(s, true), s.LocalSize < 2},
	} {
		if step.skip {
			continue
		}
		var note string
		if *step.out, note, err = ringExchange(ctx, cfg, conns, step.sizes, step.reduce, step.ring); err != nil {
			return t, fmt.Errorf("%s: %w", step.what, err)
		}
		if note != "" {
			t.notes += "# " + step.what + ":\n" + note
		}
	}
	return t, nil
}

// sharedSteps are the one-rank ring's step (1) and the every-rank ring's
// as a multiple of it (the median over the large sizes of their ratio at
// each: one size's pair is one noisy sample on a loaded host), for
// fitNICs.
func sharedSteps(sizes, large []int, inter, interAll []float64) (single, all float64) {
	var ratios []float64
	for i, n := range large {
		if j := slices.Index(sizes, n); j >= 0 && i < len(interAll) && inter[j] > 0 {
			ratios = append(ratios, interAll[i]/inter[j])
		}
	}
	if len(ratios) == 0 {
		return 0, 0
	}
	return 1, calibrate.Median(ratios)
}

// fitNICs is Model.NICs from the rings between nodes at the largest size:
// single, one rank of each node exchanging; all, every one of its local
// ranks at once. With k NICs, ⌈local/k⌉ messages share one and a step
// takes that many times single: the k (1 to local) whose share is
// nearest all/single, the fewest on a tie; 0 (a link per rank) where that
// is local, the ranks not slowing each other down.
func fitNICs(local int, single, all float64) int {
	if local < 2 || !(single > 0) || !(all > 0) {
		return 0
	}
	share := all / single
	best, bestErr := 0, math.Inf(1)
	for k := 1; k <= local; k++ {
		if e := math.Abs(math.Ceil(float64(local)/float64(k)) - share); e < bestErr {
			best, bestErr = k, e
		}
	}
	if best == local {
		return 0
	}
	return best
}

// fitTwoLinks fits the model of a calibration across the nodes of s to
// the rings' times (measureLinks) and reports each ring: Intra from the
// ring within the nodes (the transport's default Intra where every node
// has one rank), Inter from the ring between them, γ from the reducing
// steps of the first, NICs from the third (fitNICs); Segment, Ports and
// LoneAlpha the transport's defaults (the refit that fits Ports and
// LoneAlpha on one host assumes one link, so it is not run across nodes).
func fitTwoLinks(cfg *config, w io.Writer, s cost.Shape, sizes, large []int, t linkTimes, kernel float64, kernelBytes int) (cost.Model, error) {
	m := defaultModel(cfg.transport)
	m.Cores, m.ExchangeWork, m.CacheWork, m.CacheWorkBytes = 0, 0, 0, 0
	e := calibrate.Exchange{Transport: cfg.transport, Ranks: cfg.ranks, Iters: cfg.iters, Warmup: cfg.warmup, Sizes: sizes, Large: large,
		Kernel: kernel, KernelBytes: kernelBytes}
	if _, err := fmt.Fprintf(w, "# ringddp bench -calibrate: transport %s, %d ranks on %d nodes of %d: each link timed alone\n", cfg.transport, cfg.ranks, s.Nodes, s.LocalSize); err != nil {
		return m, err
	}
	if t.intra != nil {
		ie := e
		ie.Ring, ie.Role, ie.PerStep, ie.Reduced = "each node's ranks among themselves, every node at once", "intra", t.intra, t.intraReduced
		ie.Fit = calibrate.FitLink(sizes, t.intra)
		ie.Gamma = calibrate.FitGamma(sizes, t.intra, large, t.intraReduced, kernel)
		m.Intra, m.Gamma = ie.Fit.Link, ie.Gamma
		if err := calibrate.WriteExchange(w, ie); err != nil {
			return m, err
		}
	}
	ee := e
	ee.Ring, ee.Role, ee.PerStep, ee.Reduced = "one rank of each node (local rank 0) over the nodes, the others idle", "inter", t.inter, t.interReduced
	ee.Fit = calibrate.FitLink(sizes, t.inter)
	m.Inter = ee.Fit.Link
	if t.interReduced != nil {
		ee.Gamma = calibrate.FitGamma(sizes, t.inter, large, t.interReduced, kernel)
		m.Gamma = ee.Gamma
	}
	if err := calibrate.WriteExchange(w, ee); err != nil {
		return m, err
	}
	if t.interAll != nil {
		single, all := sharedSteps(sizes, large, t.inter, t.interAll)
		m.NICs = fitNICs(s.LocalSize, single, all)
		if _, err := fmt.Fprintf(w, "# every local rank over the nodes at once, %s..%s: a step %.2fx one rank a node's (median over the sizes): nics = %d (0: a link per rank)\n#\n",
			bytesize.Format(large[0]), bytesize.Format(large[len(large)-1]), all/single, m.NICs); err != nil {
			return m, err
		}
	}
	if _, err := io.WriteString(w, t.notes); err != nil {
		return m, err
	}
	if err := m.Validate(); err != nil {
		return m, fmt.Errorf("the fitted model: %w", err)
	}
	return m, nil
}
