package allreduce

import (
	"fmt"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// RootedSchedule is the schedule of Broadcast and Reduce (the collectives
// with a root): the binomial tree (treeBroadcast, treeReduce: ⌈log2 N⌉
// rounds of the whole buffer, for small buffers), the pipelined chain
// (bcast_large.go, reduce_large.go: S+N−2 rounds of one segment, for
// large ones), or RootedAuto, the default: whichever the group's cost
// model predicts faster, per size class (PredictRooted), as Auto is for
// AllReduce. The chain needs three ranks; on two, every schedule is the
// binomial tree (one message either way). Every rank of a group must use
// the same schedule (as the same model): the agreement step carries it
// (agree.go), so ranks that differ fail with a mismatch that names both
// schedules where they are ring neighbours, and the ranks they abort fail
// after them; a rank whose part completed before that (a root that only
// sends) fails on its next collective (TestRootedScheduleDisagreement).
type RootedSchedule uint8

const (
	RootedAuto  RootedSchedule = iota // "auto": the cost model's choice per size class
	RootedTree                        // "tree": the binomial tree
	RootedChain                       // "chain": the pipelined chain (three ranks or more)
)

// rootedSchedules lists every schedule, RootedAuto first.
func rootedSchedules() []RootedSchedule { return []RootedSchedule{RootedAuto, RootedTree, RootedChain} }

func (s RootedSchedule) String() string {
	switch s {
	case RootedAuto:
		return "auto"
	case RootedTree:
		return "tree"
	case RootedChain:
		return "chain"
	}
	return fmt.Sprintf("RootedSchedule(%d)", uint8(s))
}

// RootedScheduleNames is the list of schedule names, comma-separated,
// for help texts and errors.
func RootedScheduleNames() string {
	var names []string
	for _, s := range rootedSchedules() {
		names = append(names, s.String())
	}
	return strings.Join(names, ", ")
}

// ParseRootedSchedule reads a schedule's name (RootedScheduleNames).
func ParseRootedSchedule(name string) (RootedSchedule, error) {
	for _, s := range rootedSchedules() {
		if name == s.String() {
			return s, nil
		}
	}
	return RootedAuto, fmt.Errorf("%w: unknown Broadcast/Reduce schedule %q (want one of %s)", ErrInvalid, name, RootedScheduleNames())
}

// WithRootedSchedule sets the schedule of the group's Broadcast and Reduce
// calls (RootedAuto unless set), like OpenMPI's coll_tuned_bcast_algorithm;
// groups split from it inherit it. An unknown value is an error at
// NewGroup.
func WithRootedSchedule(s RootedSchedule) GroupOption {
	return func(g *Group) { g.asked[KindBroadcast], g.asked[KindReduce] = uint8(s), uint8(s) }
}

// RootedScheduleFor is the schedule a Broadcast (kind KindBroadcast) or
// Reduce of the given bytes runs on g: RootedTree or RootedChain, as
// AlgorithmFor says for AllReduce (on the group's shape if known, else
// its ranks on one node).
func (g *Group) RootedScheduleFor(kind Kind, bytes int) RootedSchedule {
	if kind != KindBroadcast && kind != KindReduce {
		return RootedTree
	}
	return RootedSchedule(g.pickOn(kind, bytes, g.knownShape()))
}

// RootedPrediction is the predicted time of Broadcast and Reduce on a
// shape, under a model: each schedule's (agreement step included; the
// chain's +Inf below three ranks) and the one a group runs, Chain set
// when it is the chain.
type RootedPrediction struct {
	TreeSeconds, ChainSeconds float64
	Chain                     bool
}

// PredictRooted predicts a Broadcast (kind KindBroadcast) or Reduce
// (KindReduce) of bytes on shape s under m, and says which schedule a
// group with that model runs for it (the faster at the lower end of the
// size class, as the group chooses once per class).
func PredictRooted(m cost.Model, s cost.Shape, kind Kind, bytes int) (RootedPrediction, error) {
	if kind != KindBroadcast && kind != KindReduce {
		return RootedPrediction{}, fmt.Errorf("%w: PredictRooted of %v: only Broadcast and Reduce have a schedule to choose", ErrInvalid, kind)
	}
	if s.Ranks == 1 {
		return RootedPrediction{ChainSeconds: math.Inf(1)}, nil
	}
	tree, _ := scheduleOf(kind, uint8(RootedTree))
	chain, _ := scheduleOf(kind, uint8(RootedChain))
	b := float64(bytes)
	p := RootedPrediction{TreeSeconds: tree.predict(m, s, b), ChainSeconds: chain.predict(m, s, b)}
	if s.Ranks > 2 {
		p.Chain = chooseRow(m, s, kind, classBytes(sizeClass(bytes))) == uint8(RootedChain)
	}
	return p, nil
}
