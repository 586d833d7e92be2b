package allreduce

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// WithModel sets the cost model Auto chooses by (DefaultModel otherwise).
// Every rank must use the same model: Auto's choice is made on each rank
// from the model and the group's shape, and ranks that choose differently
// fail with a mismatch.
func WithModel(m cost.Model) GroupOption {
	return func(g *Group) { g.model, g.modelSet = m, true }
}

// Prediction is one algorithm's predicted time for one call.
type Prediction struct {
	Algorithm Algorithm
	Seconds   float64
}

// runsOn says whether algorithm a can run on a group of shape s.
func (s algorithmSpec) runsOn(sh cost.Shape) bool {
	if s.cost == nil {
		return false
	}
	if s.needs&needsPeerMemory != 0 && !sh.PeerMemory {
		return false
	}
	if s.needs&needsTopology != 0 && !sh.Topology {
		return false
	}
	return true
}

// Predict is the predicted time of an AllReduce of the given bytes on a
// group of shape s under model m, for every algorithm that can run there
// (in table order, Auto left out).
func Predict(m cost.Model, s cost.Shape, bytes int) []Prediction {
	var out []Prediction
	for _, a := range Algorithms() {
		sp, _ := a.spec()
		if a == Auto || !sp.runsOn(s) {
			continue
		}
		out = append(out, Prediction{a, sp.predict(m, s, float64(max(bytes, 0)))})
	}
	return out
}

// PredictAlgorithm is algorithm a's predicted time for an AllReduce of
// the given bytes on a group of shape s under model m, as Predict gives
// it; ok is false when a cannot run there (or is Auto).
func PredictAlgorithm(m cost.Model, s cost.Shape, a Algorithm, bytes int) (seconds float64, ok bool) {
	sp, known := a.spec()
	if !known || a == Auto || !sp.runsOn(s) {
		return 0, false
	}
	return sp.predict(m, s, float64(max(bytes, 0))), true
}

// Choose is Auto's pick for an AllReduce of the given bytes on a group of
// shape s under model m: the algorithm of least predicted time that can
// run there. On a tie (within a relative 1e-9: the formulas add the same
// terms in different orders) the one with fewer latency steps wins (its
// time with only α, messages whole: latencySteps), then the earlier in
// table order. Ties are real: with every message in pieces of one size,
// the ring and halving-doubling send as many pieces of as many bytes; but
// a rank of halving-doubling waits on one partner at a time, 2·log2 N
// times, and a ring rank on its left neighbour, which waits on its own, 2(N-1)
// times, so every rank's delays reach every other: on 4 tcp processes hd
// measured 0.71-0.80x the ring's time at 4-64 MiB. A group of one rank
// takes the ring, which returns at once.
//
// With Model.Cores, algorithms that move the same bytes tie at the cores
// bound of their equal work (cost.Work); the tie then goes first to the
// shorter schedule, the one whose time without the bound is less, and
// only then to fewer latency steps.
func Choose(m cost.Model, s cost.Shape, bytes int) Algorithm {
	best, bestT := Ring, math.Inf(1)
	var bestKey *tieKey // best's, worked out when a tie needs it
	for _, p := range Predict(m, s, bytes) {
		switch {
		case p.Seconds < bestT*(1-1e-9):
			best, bestT, bestKey = p.Algorithm, p.Seconds, nil
		case p.Seconds <= bestT*(1+1e-9):
			if bestKey == nil {
				bestKey = newTieKey(m, s, best, bytes)
			}
			if k := newTieKey(m, s, p.Algorithm, bytes); k.less(bestKey) {
				best, bestT, bestKey = p.Algorithm, min(bestT, p.Seconds), k
			}
		}
	}
	return best
}

// tieKey orders algorithms whose predictions tie: by the schedule's time
// without the cores bound (where the model has one), then by latency
// steps.
type tieKey struct{ schedule, steps float64 }

// newTieKey is algorithm a's tie-break key for bytes on shape s under m.
func newTieKey(m cost.Model, s cost.Shape, a Algorithm, bytes int) *tieKey {
	k := &tieKey{steps: latencySteps(m, s, a, bytes)}
	if m.Cores > 0 {
		sp, _ := a.spec()
		k.schedule = sp.cost(m, s, float64(max(bytes, 0)))
	}
	return k
}

// less reports whether k wins a tie against o: a shorter schedule (by
// more than rounding), else fewer latency steps.
func (k *tieKey) less(o *tieKey) bool {
	switch {
	case k.schedule < o.schedule*(1-1e-9):
		return true
	case o.schedule < k.schedule*(1-1e-9):
		return false
	}
	return k.steps < o.steps
}

// latencySteps is algorithm a's predicted time with the links' α alone
// (no per-byte cost, no reduction) and messages whole: its latency steps
// on the critical path, in units of α; Choose's tie-break.
func latencySteps(m cost.Model, s cost.Shape, a Algorithm, bytes int) float64 {
	lat := cost.Model{Intra: cost.Link{Alpha: m.Intra.Alpha}, Inter: cost.Link{Alpha: m.Inter.Alpha}, Ports: m.Ports}
	t, _ := PredictAlgorithm(lat, s, a, bytes)
	return t
}

// sizeClass is the index of Auto's cache entry for a call of b bytes:
// classes are powers of two, [2^(k-1), 2^k) for k ≥ 1 and 0 for 0 bytes,
// and each is chosen at its lower end, so calls of power-of-two sizes get
// exactly the model's argmin.
func sizeClass(b int) int { return bits.Len(uint(b)) }

// classBytes is the size Auto chooses class k's algorithm at.
func classBytes(k int) int {
	if k == 0 {
		return 0
	}
	return 1 << (k - 1)
}

// log2ceil is ⌈log2 n⌉ for n ≥ 1.
func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

// floorPow2 is the largest power of two ≤ n, for n ≥ 1.
func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

// KnownMeasurement reports a profile's measurement (cost.Measurement) of
// a collective, algorithm or schedule this package does not know: the
// check cost.ReadProfile takes.
func KnownMeasurement(m cost.Measurement) error {
	switch m.Collective {
	case "":
		_, err := ParseAlgorithm(m.Algorithm)
		return err
	case "broadcast", "reduce":
		if s, err := ParseRootedSchedule(m.Algorithm); err != nil || s == RootedAuto {
			return fmt.Errorf("%w: %s measured under schedule %q (want tree or chain)", ErrInvalid, m.Collective, m.Algorithm)
		}
		return nil
	}
	return fmt.Errorf("%w: measurement of collective %q (want none for allreduce, broadcast or reduce)", ErrInvalid, m.Collective)
}
