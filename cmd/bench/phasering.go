package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// The inter-node phases timed as the compositions run them. Torus's is L
// ring all-reduces between nodes at once, one per local rank, each of
// M/L, through each node's one link; hierarchical's is one ring of M.
// The model prices the L rings either over the link shared L ways (per
// NIC: cost.Model.SharedBy, which hides each step's α behind the other
// rings' bytes) or by a measured ratio to the one ring (cost.SideBySide),
// which this step measures: a ring all-reduce between nodes — K−1
// reduce-scatter steps of M/K, each received into a reducing sink, then
// K−1 all-gather steps of M/K, every step's message cut into lock-step
// pieces of at most the transport's Segment (allreduce's pieces.go) — of
// local rank 0 of every node alone (one ring of M), then of every local
// rank at once, each its own ring of M/L (torus's phase). Unlike the ring
// exchanges (pingpong.go), whose steps stream one size, these start
// together and end together, as the phases do, with the reductions and
// the pieces' lock steps of the algorithms.

// phaseGroup is the header Group of the phases' messages.
const phaseGroup = pingGroup + 8

// phaseSizes are the sizes M the phases are timed at, up to the largest
// of the calibration's messages (-calib-max), at least the first: the
// blocks torus runs its inter-node phase on (pipelineBlocks: 4 MiB, at
// most 8 MiB once a buffer makes several), and 16 MiB. Not smaller: a
// link shaped by a token bucket (the test bed's tbf, 5 ms of its rate)
// that a stalled rank lets refill carries the next round partly at the
// wire's speed, by up to a tenth of a 4 MiB phase's time and more of a
// smaller one's.
func phaseSizes(calibMax int) []int {
	sizes := []int{4 << 20}
	for _, n := range []int{8 << 20, 16 << 20} {
		if n <= calibMax {
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// minPhaseRounds is the fewest timed rounds of a phase at a size (more
// with -iters): the ratio is of each phase's fastest round.
const minPhaseRounds = 7

// timePhases times, for each of sizes (M), the one ring's all-reduce of M
// and the L = s.LocalSize rings' all-reduces of M/L at once: -warmup
// untimed and max(-iters, minPhaseRounds) timed rounds each, every rank
// starting each round together, a round's time the phase's (round); the
// fastest round's time: on a loaded
// host another job only slows a round down, and the one ring, whose
// every step waits for each of its K ranks, the most (loaded, the median
// round of the one ring at 1 MiB took 2.3× the two rings' at once). It
// returns the times in the process holding rank 0, nil elsewhere.
func timePhases(ctx context.Context, cfg *config, conns []transport.Conn, s cost.Shape, sizes []int, segment int) (one, all []float64, err error) {
	for _, c := range conns {
		if c.Rank() == 0 {
			one, all = make([]float64, len(sizes)), make([]float64, len(sizes))
		}
	}
	err = onEveryRank(ctx, conns, func(ctx context.Context, c transport.Conn) error {
		var o, a []float64
		if c.Rank() == 0 {
			o, a = one, all
		}
		p := phaseSide{cfg: cfg, c: c, s: s, segment: segment}
		return p.run(ctx, sizes, o, a)
	})
	if err != nil {
		return nil, nil, err
	}
	return one, all, nil
}

// phaseSide is one rank's part of timePhases.
type phaseSide struct {
	cfg     *config
	c       transport.Conn
	s       cost.Shape
	segment int
	step    uint32
}

// run times both phases at each size into one and all (nil but on rank 0).
func (p *phaseSide) run(ctx context.Context, sizes []int, one, all []float64) error {
	largest := sizes[len(sizes)-1]
	buf := make([]byte, largest)
	copySink, addSink := &pingSink{dst: make([]byte, largest)}, &addSink{dst: make([]byte, largest)}
	for si, m := range sizes {
		var times [2][]float64 // the one ring's rounds, the side-by-side rings'
		// Rounds alternate between the two, so that a load that comes and
		// goes slows both alike.
		for round := range p.cfg.warmup + max(p.cfg.iters, minPhaseRounds) {
			for pass, every := range []bool{false, true} {
				t, err := p.round(ctx, buf, m, every, 4*round+2*pass, copySink, addSink)
				if err != nil {
					return err
				}
				if round >= p.cfg.warmup {
					times[pass] = append(times[pass], t)
				}
			}
		}
		if one != nil {
			one[si], all[si] = slices.Min(times[0]), slices.Min(times[1])
		}
	}
	return nil
}

// round is one round of the phase of m bytes: the one ring's all-reduce
// of m (every false) or every local rank's of m/L at once, started by
// every rank together (agreeAll, numbered seq) and timed by each rank
// from there to the end of its own part; the round's time is the longest
// of those (agreeMax, seq+1): a rank that leaves the start sooner sends
// sooner and waits longer for the others, so the longest is from the
// first start to the last end, the phase's time.
func (p *phaseSide) round(ctx context.Context, buf []byte, m int, every bool, seq int, copySink, addSink transport.Sink) (float64, error) {
	right, left, member := interRing(p.s, every).peers(p.c.Rank(), p.c.Size())
	bytes := m
	if every {
		bytes = m / p.s.LocalSize
	}
	if _, err := agreeAll(ctx, p.c, phaseGroup, m, seq, false); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if member {
		if err := p.allReduce(ctx, buf, bytes, p.ringSize(every), right, left, copySink, addSink); err != nil {
			return 0, fmt.Errorf("the ring all-reduce of %d bytes between nodes: %w", bytes, err)
		}
	}
	var mine float64
	if member {
		mine = time.Since(t0).Seconds()
	}
	return agreeMax(ctx, p.c, phaseGroup, m, seq+1, mine)
}

// ringSize is how many ranks the ring of local rank 0 (every false) or of
// this rank's local rank has: the nodes.
func (p *phaseSide) ringSize(every bool) int {
	i := 0
	if every {
		i = p.c.Rank() - p.s.NodeOfRank(p.c.Rank())*p.s.LocalSize
	}
	k := 0
	for n := 0; n*p.s.LocalSize+i < p.c.Size(); n++ {
		k++
	}
	return k
}

// allReduce is one ring all-reduce of b bytes among k ranks: 2(k−1)
// steps of b/k, the first k−1 reducing, each as pieces of at most segment.
func (p *phaseSide) allReduce(ctx context.Context, buf []byte, b, k, right, left int, copySink, addSink transport.Sink) error {
	chunk := b / k
	for st := range 2 * (k - 1) {
		var sink transport.Sink = copySink
		if st < k-1 {
			sink = addSink
		}
		for off := 0; off < chunk || off == 0; off += p.segment {
			n := min(p.segment, chunk-off)
			if p.segment <= 0 {
				n = chunk
			}
			h := transport.Header{Group: phaseGroup, Seq: uint64(b), Root: -1, Count: int64(n), Step: p.step}
			p.step++
			if err := exchange(ctx, p.c, right, h, buf[:n], left, n, sink); err != nil {
				return err
			}
			if p.segment <= 0 {
				break
			}
		}
	}
	return nil
}

// sideBySideReport are the sizes whose torus and hierarchical predictions
// fitSideBySide's report gives.
var sideBySideReport = []int{1 << 20, 4 << 20, 16 << 20, 64 << 20}

// fitSideBySide sets m's SideBySide from the phases timed at sizes: L =
// s.LocalSize rings, and the median over the sizes of the L rings' time
// over the one ring's (one size's pair is one noisy sample on a loaded
// host). It reports each size's times beside the model's prices of the
// two phases (the L rings as the link shared by NICs, as before), and
// torus's and hierarchical's predictions at sideBySideReport with the
// ratio and without.
func fitSideBySide(w io.Writer, m *cost.Model, s cost.Shape, rounds int, sizes []int, one, all []float64) error {
	before := *m
	inter := s.InterShape()
	var b strings.Builder
	fmt.Fprintf(&b, "# the inter-node phases as the compositions run them (ring all-reduces between nodes, pieces of %s, reduce-scatter reducing), the fastest of %d rounds: one ring of M (local rank 0 of each node) against the %d rings of M/L side by side (every local rank's)\n",
		bytesize.Format(m.Segment), max(rounds, minPhaseRounds), s.LocalSize)
	fmt.Fprintf(&b, "#%12s %12s %12s %8s %14s %14s\n#%12s %12s %12s %8s %14s %14s\n",
		"M", "one ring", "side by side", "ratio", "one priced", "shared priced", "(B)", "(ms)", "(ms)", "", "(ms)", "(ms)")
	var ratios []float64
	for i, n := range sizes {
		if i >= len(one) || i >= len(all) || !(one[i] > 0) {
			continue
		}
		r := all[i] / one[i]
		ratios = append(ratios, r)
		p1, _ := allreduce.PredictAlgorithm(before, inter, allreduce.Ring, n)
		pl, _ := allreduce.PredictAlgorithm(before.SharedBy(s.LocalSize), inter, allreduce.Ring, n/s.LocalSize)
		fmt.Fprintf(&b, "%13d %12.3f %12.3f %8.3f %14.3f %14.3f\n", n, one[i]*1e3, all[i]*1e3, r, p1*1e3, pl*1e3)
	}
	if len(ratios) == 0 {
		return fmt.Errorf("the inter-node phases: no size timed")
	}
	m.SideBySide = cost.SideBySide{Rings: s.LocalSize, Ratio: calibrate.Median(ratios)}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("the inter-node phases: %w", err)
	}
	fmt.Fprintf(&b, "# side_by_side = %d rings, ratio %.3f (the median): torus's and mesh's inter-node phases priced at that times one ring of their bytes\n",
		s.LocalSize, m.SideBySide.Ratio)
	s.Overlap = true // the blocks as the mixed transport runs them
	for _, n := range sideBySideReport {
		now, ok1 := allreduce.PredictAlgorithm(*m, s, allreduce.Torus, n)
		was, ok2 := allreduce.PredictAlgorithm(before, s, allreduce.Torus, n)
		hier, ok3 := allreduce.PredictAlgorithm(*m, s, allreduce.Hierarchical, n)
		if ok1 && ok2 && ok3 {
			fmt.Fprintf(&b, "# %s: torus %.2f ms (%.2f ms with the rings as the link shared); hierarchical %.2f ms\n",
				bytesize.Format(n), now*1e3, was*1e3, hier*1e3)
		}
	}
	b.WriteString("#\n")
	_, err := io.WriteString(w, b.String())
	return err
}
