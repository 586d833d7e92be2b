package allreduce

import (
	"fmt"
	"strings"
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
func WithRootedSchedule(s RootedSchedule) GroupOption { return func(g *Group) { g.rooted = s } }

// checkRooted reports an unknown schedule.
func (g *Group) checkRooted() error {
	if g.rooted > RootedChain {
		return fmt.Errorf("%w: unknown Broadcast/Reduce schedule %v (want one of %s)", ErrInvalid, g.rooted, RootedScheduleNames())
	}
	return nil
}
