package allreduce

import (
	"context"
	"fmt"
	"math"
	"math/bits"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The selector: which row of the schedule table (schedules.go) a call
// runs, for every collective alike. A group runs the row it asked for
// (WithAlgorithm, WithRootedSchedule, WithSchedule) where the row runs on
// it; else Auto's pick: the row of least predicted time on the group's
// shape under its model (chooseRow), among the rows whose needs the group
// meets, made once per power-of-two size class and cached.

// WithModel sets the cost model Auto chooses by (cost.DefaultModelFor the
// group otherwise). Every rank must use the same model: Auto's choice is
// made on each rank from the model and the group's shape, and ranks that
// choose differently fail with a mismatch.
func WithModel(m cost.Model) GroupOption {
	return func(g *Group) { g.model, g.modelSet = m, true }
}

// WithSchedule sets the algorithm of collective k by its row's name in
// the schedule table: for AllReduce an Algorithm's name (as
// WithAlgorithm), for Broadcast and Reduce "tree" or "chain" (as
// WithRootedSchedule, for the one collective), for ReduceScatter and
// AllGather "ring" or "hd" (halving-doubling: ChunkBounds' layout, or the
// call's); "auto" for Auto's pick, the default. An unknown name, or an
// algorithm the group cannot run, is an error at NewGroup. Groups split
// from it inherit it.
func WithSchedule(k Kind, name string) GroupOption {
	return func(g *Group) {
		a, ok := rowNamed(k, name)
		if !ok || int(k) >= len(g.asked) {
			g.badOption = fmt.Errorf("%w: %v has no algorithm %q", ErrInvalid, k, name)
			return
		}
		g.asked[k] = a
	}
}

// checkAsked is NewGroup's check that the group can run the algorithms it
// asks for: a clear error on every rank before any communication.
func (g *Group) checkAsked() error {
	if g.badOption != nil {
		return g.badOption
	}
	for k := KindAllReduce; k < KindBarrier; k++ {
		a := g.asked[k]
		if a == 0 {
			continue
		}
		s, ok := scheduleOf(k, a)
		switch {
		case !ok && k == KindAllReduce:
			return fmt.Errorf("%w: unknown algorithm %v (want one of %s)", ErrInvalid, Algorithm(a), AlgorithmNames())
		case !ok:
			return fmt.Errorf("%w: unknown Broadcast/Reduce schedule %v (want one of %s)", ErrInvalid, RootedSchedule(a), RootedScheduleNames())
		}
		if _, _, shared := PeerMemoryOf(g.conn); s.needs&needsPeerMemory != 0 && !shared {
			return fmt.Errorf("%w: algorithm %s needs a transport whose ranks can read one another's buffers (%T cannot)", ErrInvalid, s.name, g.conn)
		}
		if s.needs&needsTopology != 0 && g.node == "" {
			return fmt.Errorf("%w: algorithm %s needs to know which node each rank runs on (use inproc.WithLocalSize, tcp, or allreduce.WithNode)", ErrInvalid, s.name)
		}
	}
	return nil
}

// Prediction is one algorithm's predicted time for one call.
type Prediction struct {
	Algorithm Algorithm
	Seconds   float64
}

// Predict is the predicted time of an AllReduce of the given bytes on a
// group of shape s under model m, for every algorithm that can run there
// (in table order, Auto left out).
func Predict(m cost.Model, s cost.Shape, bytes int) []Prediction {
	var out []Prediction
	for a := uint8(1); a <= rowsOf(KindAllReduce); a++ {
		sp, _ := scheduleOf(KindAllReduce, a)
		if sp.runsOn(s, true) {
			out = append(out, Prediction{Algorithm(a), sp.predict(m, s, float64(max(bytes, 0)))})
		}
	}
	return out
}

// PredictAlgorithm is algorithm a's predicted time for an AllReduce of
// the given bytes on a group of shape s under model m, as Predict gives
// it; ok is false when a cannot run there (or is Auto).
func PredictAlgorithm(m cost.Model, s cost.Shape, a Algorithm, bytes int) (seconds float64, ok bool) {
	sp, known := a.spec()
	if !known || !sp.runsOn(s, true) {
		return 0, false
	}
	return sp.predict(m, s, float64(max(bytes, 0))), true
}

// Choose is what Auto runs for an AllReduce of the given bytes on a group
// of shape s under model m: the algorithm of least predicted time that
// can run there, at the lower end of the bytes' size class (a power of
// two, sizeClass: a group chooses once per class and caches it), so that
// every caller that names Auto's pick (cmd/bench -explain, the
// compositions' formulas, the calibration's checks) names the algorithm
// a group runs (decideRow, which the group's pick calls too). On a tie (within a relative 1e-9: the formulas add the same
// terms in different orders) the one with fewer latency steps wins (its
// time with only α, messages whole: latencySteps), then the earlier in
// table order. Ties are real: with every message in pieces of one size,
// the ring and halving-doubling send as many pieces of as many bytes; but
// a rank of halving-doubling waits on one partner at a time, 2·log2 N
// times, and a ring rank on its left neighbour, which waits on its own, 2(N-1)
// times, so every rank's delays reach every other, and where the two tie
// halving-doubling measured faster (docs/measurements.md). A group of one
// rank takes the ring, which returns at once.
//
// With Model.Cores, algorithms that move the same bytes tie at the cores
// bound of their equal work (cost.Work); the tie then goes first to the
// shorter schedule, the one whose time without the bound is less, and
// only then to fewer latency steps.
func Choose(m cost.Model, s cost.Shape, bytes int) Algorithm {
	return Algorithm(decideRow(m, s, KindAllReduce, bytes))
}

// decideRow is the one decision of which row of collective k Auto runs
// for a call of the given bytes on shape s under m: chooseRow at the
// lower end of the bytes' size class. Group.pick, pickOn, Choose and the
// compositions' prices of their sub-groups all go through it, so what is
// explained is what runs.
func decideRow(m cost.Model, s cost.Shape, k Kind, bytes int) uint8 {
	return chooseRow(m, s, k, classBytes(sizeClass(max(bytes, 0))))
}

// chooseRow is Auto's pick among the rows of collective k for a call of
// the given bytes on shape s under m, as Choose says for AllReduce: the
// least predicted time, ties to the shorter schedule (with Model.Cores),
// then to fewer latency steps, then to the earlier row; row 1 when
// nothing else runs.
func chooseRow(m cost.Model, s cost.Shape, k Kind, bytes int) uint8 {
	best, bestT := uint8(1), math.Inf(1)
	var bestKey *tieKey // best's, worked out when a tie needs it
	b := float64(max(bytes, 0))
	for a := uint8(1); ; a++ {
		sp, ok := scheduleOf(k, a)
		if !ok {
			return best
		}
		if !sp.runsOn(s, true) {
			continue
		}
		switch t := sp.predict(m, s, b); {
		case t < bestT*(1-1e-9):
			best, bestT, bestKey = a, t, nil
		case t <= bestT*(1+1e-9):
			if bestKey == nil {
				bestKey = newTieKey(m, s, k, best, b)
			}
			if key := newTieKey(m, s, k, a, b); key.less(bestKey) {
				best, bestT, bestKey = a, min(bestT, t), key
			}
		}
	}
}

// tieKey orders algorithms whose predictions tie: by the schedule's time
// without the cores bound (where the model has one), then by latency
// steps.
type tieKey struct{ schedule, steps float64 }

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

// newTieKey is row a's tie-break key for b bytes on shape s under m.
func newTieKey(m cost.Model, s cost.Shape, k Kind, a uint8, b float64) *tieKey {
	sp, _ := scheduleOf(k, a)
	key := &tieKey{steps: latencySteps(m, s, sp, b)}
	if m.Cores > 0 {
		key.schedule = sp.cost(m, s, b)
	}
	return key
}

// latencySteps is row sp's predicted time with the links' α alone (no
// per-byte cost, no reduction) and messages whole: its latency steps on
// the critical path, in units of α; chooseRow's tie-break.
func latencySteps(m cost.Model, s cost.Shape, sp schedule, b float64) float64 {
	lat := cost.Model{Intra: cost.Link{Alpha: m.Intra.Alpha}, Inter: cost.Link{Alpha: m.Inter.Alpha}, Ports: m.Ports}
	return sp.predict(lat, s, b)
}

// bestCost is the predicted time of Auto's pick among collective k's rows
// for b bytes on shape s, as a sub-group of a composition runs it: the
// least of their predictions (0 on one rank).
func bestCost(m cost.Model, s cost.Shape, k Kind, b float64) float64 {
	if s.Ranks <= 1 {
		return 0
	}
	sp, _ := scheduleOf(k, decideRow(m, s, k, int(b)))
	return sp.predict(m, s, b)
}

// bestWork is the busiest node's work (cost.Work) of the row bestCost
// prices.
func bestWork(m cost.Model, s cost.Shape, k Kind, b float64) float64 {
	if s.Ranks <= 1 {
		return 0
	}
	sp, _ := scheduleOf(k, decideRow(m, s, k, int(b)))
	return sp.work(m, s, b)
}

// ChoiceBytes is the size Auto chooses a call of the given bytes at (the
// lower end of its power-of-two size class, sizeClass): Choose(m, s,
// bytes) is the least predicted time at ChoiceBytes(bytes).
func ChoiceBytes(bytes int) int { return classBytes(sizeClass(max(bytes, 0))) }

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

// callBytes is the bytes a call's algorithm is chosen by: each rank's
// whole buffer (a ReduceScatter's operand, an AllGather's result).
func callBytes(c *call) int {
	if c.kind == KindReduceScatter {
		return len(c.src)
	}
	return len(c.buf)
}

// scheduleFor is the row a call of collective k of the given bytes runs
// on g (pick).
func (g *Group) scheduleFor(ctx context.Context, k Kind, bytes int) (schedule, error) {
	a, err := g.pick(ctx, k, bytes)
	if err != nil {
		return schedule{}, err
	}
	s, _ := scheduleOf(k, a)
	return s, nil
}

// pick is the row a call of collective k of the given bytes runs on g:
// the asked one or a test's fixed threshold (pickFixed), else Auto's
// pick, cached per size class. Auto picks on the group's shape: learnt
// (costShape: the first call of a group whose ranks know their nodes
// learns the topology, a nested all-gather, once per group) where one of
// the collective's rows needs the shape's topology or shared memory, so
// that every rank chooses from the same shape; else the shape known so
// far (knownShape), with no communication.
func (g *Group) pick(ctx context.Context, k Kind, bytes int) (uint8, error) {
	if a, ok := g.pickFixed(k, bytes); ok {
		return a, nil
	}
	class := sizeClass(bytes)
	if a := g.picked(k, class); a != 0 {
		return a, nil
	}
	s := g.knownShape()
	if needsShape(k) {
		var err error
		if s, err = g.costShape(ctx); err != nil {
			return 0, err
		}
	}
	a := g.choose(k, s, bytes)
	g.seq.mu.Lock()
	g.picks[k][class] = a
	g.seq.mu.Unlock()
	return a, nil
}

// picked is the group's record of the row Auto ran for collective k's
// size class (0: none yet).
func (g *Group) picked(k Kind, class int) uint8 {
	g.seq.mu.Lock()
	defer g.seq.mu.Unlock()
	return g.picks[k][class]
}

// pickOn is what AlgorithmFor and RootedScheduleFor answer: the row
// asked for, else the group's record of what Auto ran for the size class
// (picked), else decideRow on shape s, what pick will run there.
func (g *Group) pickOn(k Kind, bytes int, s cost.Shape) uint8 {
	if a, ok := g.pickFixed(k, bytes); ok {
		return a
	}
	if a := g.picked(k, sizeClass(bytes)); a != 0 {
		return a
	}
	return decideRow(g.model, s, k, bytes)
}

// pickFixed is the row asked for where it runs on the group's size, or
// the row a test's tuning.chainMin fixes for a Broadcast or Reduce;
// ok is false where Auto picks.
func (g *Group) pickFixed(k Kind, bytes int) (uint8, bool) {
	if a := g.asked[k]; a != 0 {
		if s, _ := scheduleOf(k, a); s.needs&needsThreeRanks == 0 || g.size >= 3 {
			return a, true
		}
	}
	if (k == KindBroadcast || k == KindReduce) && (g.size <= 2 || g.tune.chainMin > 0) {
		if g.size > 2 && bytes >= g.tune.chainMin {
			return uint8(RootedChain), true
		}
		return uint8(RootedTree), true
	}
	return 0, false
}

// needsShape says whether a row of collective k that Auto may pick needs
// the group's topology or shared memory.
func needsShape(k Kind) bool {
	for a := uint8(1); ; a++ {
		s, ok := scheduleOf(k, a)
		if !ok {
			return false
		}
		if s.needs&needsAsking == 0 && s.needs&(needsTopology|needsPeerMemory) != 0 {
			return true
		}
	}
}

// memoSharer is a transport whose ranks share one process and a memo of
// pure computations (transport.Memo, as package sim gives).
type memoSharer interface {
	SharedMemo() *transport.Memo
}

// choiceKey is everything chooseRow depends on.
type choiceKey struct {
	m     cost.Model
	s     cost.Shape
	k     Kind
	bytes int
}

// choose is decideRow for this group's model, worked out once for all
// the ranks of a process where the transport shares a memo (on the
// simulator's 1024 ranks Tree's formula alone is slow at large sizes).
func (g *Group) choose(k Kind, s cost.Shape, bytes int) uint8 {
	if ms, ok := g.rootConn().(memoSharer); ok {
		key := choiceKey{g.model, s, k, classBytes(sizeClass(max(bytes, 0)))}
		return ms.SharedMemo().Do(key, func() any { return decideRow(g.model, s, k, bytes) }).(uint8)
	}
	return decideRow(g.model, s, k, bytes)
}

// AlgorithmFor is the AllReduce algorithm a call of the given bytes runs:
// the one asked for, or Auto's choice for its size class (the one it
// ran, once a call of the class has run). Before Auto's
// first call has learnt the topology of a group whose ranks know their
// nodes, it answers for the ranks on one node.
func (g *Group) AlgorithmFor(bytes int) Algorithm {
	g.seq.mu.Lock()
	sh := g.shape
	g.seq.mu.Unlock()
	var s cost.Shape
	if sh != nil {
		s = *sh
	} else {
		s = cost.FlatShape(g.size)
		s.PeerMemory, s.LendLimit = lending(g.conn)
	}
	return Algorithm(g.pickOn(KindAllReduce, bytes, s))
}

// Algorithm is the AllReduce algorithm in use for large buffers (64 MiB):
// AlgorithmFor(64 MiB).
func (g *Group) Algorithm() Algorithm { return g.AlgorithmFor(64 << 20) }

// knownShape is the group's shape if known, else its ranks on one node.
func (g *Group) knownShape() cost.Shape {
	g.seq.mu.Lock()
	defer g.seq.mu.Unlock()
	if g.shape != nil {
		return *g.shape
	}
	return cost.FlatShape(g.size)
}

// Shape is the group's shape for the cost model (cost.Shape): its ranks;
// the nodes they sit on, with the largest and the smallest node's ranks,
// when the ranks know their nodes (learnt as Topology learns it: a
// collective every rank calls, once; it also spares Auto's first call
// learning it); and whether they share memory. Commands and packages that
// price the group's collectives ask it rather than derive it.
func (g *Group) Shape(ctx context.Context) (cost.Shape, error) {
	if g.node != "" {
		if _, err := g.Topology(ctx); err != nil {
			return cost.Shape{}, err
		}
	}
	return g.costShape(ctx)
}

// costShape is the group's shape for the cost model (Shape), learning the
// topology inside the collective that holds the turn.
func (g *Group) costShape(ctx context.Context) (cost.Shape, error) {
	g.seq.mu.Lock()
	known := g.shape
	g.seq.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	s := cost.FlatShape(g.size)
	if g.node != "" {
		topo, err := g.learnTopology(ctx)
		if err != nil {
			return cost.Shape{}, err
		}
		s = topo.shape()
	}
	s.PeerMemory, s.LendLimit = lending(g.conn)
	s.Overlap = overlapsNodes(g.rootConn())
	g.seq.mu.Lock()
	g.shape = &s
	g.seq.mu.Unlock()
	return s, nil
}

// shape is the cost model's cost.Shape of a topology.
func (t Topology) shape() cost.Shape {
	s := cost.Shape{Ranks: t.Size(), Nodes: t.Nodes(), Topology: true, SmallestNode: t.Size()}
	for k := range s.Nodes {
		s.LocalSize = max(s.LocalSize, len(t.Members(k)))
		s.SmallestNode = min(s.SmallestNode, len(t.Members(k)))
	}
	return s
}

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
