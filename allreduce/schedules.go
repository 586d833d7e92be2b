package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The schedule table: every collective's algorithms, one row each, keyed
// by (collective, algorithm), as NCCL's tuning table keeps one cost for
// every collective and algorithm. A row gives the algorithm's schedule
// (run), what it needs of the group (needs) and its cost formula (cost,
// work); the selector (selector.go) runs the row a group asks for, or
// picks the cheapest row whose needs the group meets (Auto), for every
// collective alike. Adding an algorithm to a collective is a file with
// its schedule and formula, and a row in scheduleOf.
//
// Rows are numbered from 1 within their collective (0 is Auto): for
// AllReduce by Algorithm, for Broadcast and Reduce by RootedSchedule, for
// ReduceScatter and AllGather by the names of WithSchedule ("ring" 1,
// "hd" 2).

// schedule is one row of the table: one algorithm of one collective.
type schedule struct {
	name  string
	needs requirement
	// order is how an AllReduce row's order of combining an element's
	// operands depends on where the element falls (ReductionOrder).
	order ReductionOrder
	run   func(g *Group, ctx context.Context, h transport.Header, c *call) error
	// cost is the predicted time in seconds of a call of the given bytes
	// (the whole buffer of each rank: an AllGather's result, a
	// ReduceScatter's operand), the schedule's; work is the busiest
	// node's work in seconds of one core, which the cores bound divides
	// (cost.Work).
	cost func(m cost.Model, s cost.Shape, bytes float64) float64
	work func(m cost.Model, s cost.Shape, bytes float64) float64
}

// requirement is what a row needs of the group and its transport.
type requirement uint8

const (
	// needsPeerMemory: the transport's ranks share an address space
	// (transport.PeerMemory).
	needsPeerMemory requirement = 1 << iota
	// needsTopology: every rank knows its node (Topology): the transport
	// names it (inproc.WithLocalSize, tcp) or WithNode does.
	needsTopology
	// needsThreeRanks: the group has three ranks or more (a chain); on
	// fewer a group that asks for the row runs Auto's pick instead.
	needsThreeRanks
	// needsAsking: Auto does not pick the row; a group runs it when it
	// asks for it (WithSchedule).
	needsAsking
)

// scheduleOf is the table: row a of collective k; ok is false past the
// collective's last row, for a = 0 (Auto) and for a collective with no
// rows (Barrier: one schedule, disseminationBarrier).
func scheduleOf(k Kind, a uint8) (s schedule, ok bool) {
	switch k {
	case KindAllReduce:
		return allReduceSchedule(Algorithm(a))
	case KindReduceScatter:
		switch a {
		case 1:
			return schedule{name: "ring", run: (*Group).ringReduceScatter, cost: ringReduceScatterCost, work: ringReduceScatterWork}, true
		case 2:
			return schedule{name: "hd", needs: needsAsking, run: (*Group).hdReduceScatter, cost: hdReduceScatterCost, work: hdReduceScatterWork}, true
		}
	case KindAllGather:
		switch a {
		case 1:
			return schedule{name: "ring", run: (*Group).ringAllGather, cost: ringAllGatherCost, work: ringAllGatherWork}, true
		case 2:
			return schedule{name: "hd", needs: needsAsking, run: (*Group).hdAllGather, cost: hdAllGatherCost, work: hdAllGatherWork}, true
		}
	case KindBroadcast:
		switch RootedSchedule(a) {
		case RootedTree:
			return schedule{name: "tree", run: (*Group).treeBroadcast, cost: binomialBroadcastCost, work: binomialBroadcastWork}, true
		case RootedChain:
			return schedule{name: "chain", needs: needsThreeRanks, run: (*Group).chainBroadcast, cost: chainBroadcastCost, work: chainBroadcastWork}, true
		}
	case KindReduce:
		switch RootedSchedule(a) {
		case RootedTree:
			return schedule{name: "tree", run: (*Group).treeReduce, cost: binomialReduceCost, work: binomialReduceWork}, true
		case RootedChain:
			return schedule{name: "chain", needs: needsThreeRanks, run: (*Group).chainReduce, cost: chainReduceCost, work: chainReduceWork}, true
		}
	}
	return schedule{}, false
}

// allReduceSchedule is the table's AllReduce rows.
func allReduceSchedule(a Algorithm) (schedule, bool) {
	switch a {
	case Ring:
		return schedule{name: "ring", order: OrderRingChunks, run: (*Group).ringAllReduce, cost: ringCost, work: ringWork}, true
	case Direct:
		return schedule{name: "direct", needs: needsPeerMemory, order: OrderAnyPlace, run: (*Group).directAllReduce, cost: directCost, work: directWork}, true
	case Doubling:
		return schedule{name: "doubling", order: OrderAnyPlace, run: (*Group).doublingAllReduce, cost: doublingCost, work: doublingWork}, true
	case Tree:
		return schedule{name: "tree", run: (*Group).dtreeAllReduce, cost: treeCost, work: treeWork}, true
	case HalvingDoubling:
		return schedule{name: "hd", run: (*Group).hdAllReduce, cost: hdCost, work: hdWork}, true
	case Hierarchical:
		return schedule{name: "hierarchical", needs: needsTopology, run: (*Group).hierarchicalAllReduce, cost: hierarchicalCost, work: hierarchicalWork}, true
	case Torus:
		return schedule{name: "torus", needs: needsTopology, run: (*Group).torusAllReduce, cost: torusCost, work: torusWork}, true
	case Mesh:
		return schedule{name: "mesh", needs: needsTopology, run: (*Group).meshAllReduce, cost: meshCost, work: meshWork}, true
	}
	return schedule{}, false
}

// rowsOf is the number of rows of collective k.
func rowsOf(k Kind) uint8 {
	n := uint8(0)
	for {
		if _, ok := scheduleOf(k, n+1); !ok {
			return n
		}
		n++
	}
}

// rowNamed is the row of collective k named name (0 for "auto").
func rowNamed(k Kind, name string) (uint8, bool) {
	if name == "auto" {
		return 0, true
	}
	for a := uint8(1); a <= rowsOf(k); a++ {
		if s, _ := scheduleOf(k, a); s.name == name {
			return a, true
		}
	}
	return 0, false
}

// runsOn says whether the row can run on a group of shape sh; auto says
// Auto is choosing (which leaves out the rows it does not pick).
func (s schedule) runsOn(sh cost.Shape, auto bool) bool {
	switch {
	case s.cost == nil,
		s.needs&needsPeerMemory != 0 && !sh.PeerMemory,
		s.needs&needsTopology != 0 && !sh.Topology,
		s.needs&needsThreeRanks != 0 && sh.Ranks < 3,
		s.needs&needsAsking != 0 && auto:
		return false
	}
	return true
}

// predict is the row's predicted time: its schedule's, raised to the
// cores bound of its work (cost.Work).
func (s schedule) predict(m cost.Model, sh cost.Shape, b float64) float64 {
	t := s.cost(m, sh, b)
	if m.Cores <= 0 {
		return t
	}
	return m.Bounded(t, s.work(m, sh, b), b)
}

// ReductionOrder is how the order in which an AllReduce algorithm
// combines an element's operands depends on where the element falls in
// the buffer: what a caller that appends values to a buffer must know to
// keep the buffer's results bitwise what the buffer alone gives (ddp's
// agreement).
type ReductionOrder uint8

const (
	// OrderByPlace: the order depends on the element's place (Tree,
	// HalvingDoubling, the compositions).
	OrderByPlace ReductionOrder = iota
	// OrderAnyPlace: the order is the same wherever the element falls
	// (Direct, Doubling).
	OrderAnyPlace
	// OrderRingChunks: the ring's: chunk q is combined in the order
	// q+1, ..., q of ChunkBounds' chunks, as a ReduceScatter then an
	// AllGather with the same chunk layout combine it.
	OrderRingChunks
)

// Order is a's ReductionOrder (OrderByPlace for Auto, which is whichever
// algorithm it picks: AlgorithmFor).
func (a Algorithm) Order() ReductionOrder {
	s, _ := allReduceSchedule(a)
	return s.order
}
