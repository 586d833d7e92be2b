package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// algoAll is the -algo value that runs auto and every algorithm that can
// run on the transport.
const algoAll = "all"

// parseAlgos reads -algo: one algorithm, a comma-separated list, or all
// (auto, then every algorithm that can run on a group of shape s, in the
// table's order). A list (or all) is for -op allreduce only, the other
// collectives having one algorithm each.
func parseAlgos(s string, op collective, shape cost.Shape) ([]allreduce.Algorithm, error) {
	if s == algoAll {
		if op.kind != allreduce.KindAllReduce {
			return nil, fmt.Errorf("-algo all: -op %s has one algorithm", op.name)
		}
		out := []allreduce.Algorithm{allreduce.Auto}
		return append(out, runnable(shape)...), nil
	}
	var out []allreduce.Algorithm
	for _, name := range strings.Split(s, ",") {
		a, err := allreduce.ParseAlgorithm(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("-algo: %w (or %s)", err, algoAll)
		}
		if slices.Contains(out, a) {
			return nil, fmt.Errorf("-algo %s: %s twice", s, a)
		}
		out = append(out, a)
	}
	if len(out) > 1 && op.kind != allreduce.KindAllReduce {
		return nil, fmt.Errorf("-algo %s: a list is for -op allreduce; -op %s has one algorithm", s, op.name)
	}
	return out, nil
}

// parseSchedules reads -schedule: one of broadcast's and reduce's
// schedules, a comma-separated list, or all (auto, tree and chain).
func parseSchedules(s string) ([]allreduce.RootedSchedule, error) {
	if s == algoAll {
		s = allreduce.RootedScheduleNames()
	}
	var out []allreduce.RootedSchedule
	for _, name := range strings.Split(s, ",") {
		sch, err := allreduce.ParseRootedSchedule(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("-schedule: %w (or %s)", err, algoAll)
		}
		if slices.Contains(out, sch) {
			return nil, fmt.Errorf("-schedule %s: %s twice", s, sch)
		}
		out = append(out, sch)
	}
	return out, nil
}

// runnable lists the algorithms (Auto aside) that can run on a group of
// shape s, in the table's order.
func runnable(s cost.Shape) []allreduce.Algorithm {
	var out []allreduce.Algorithm
	for _, p := range allreduce.Predict(cost.DefaultModelFor(s), s, 0) {
		out = append(out, p.Algorithm)
	}
	return out
}

// algoNames lists algorithms' names, comma-separated.
func algoNames(as []allreduce.Algorithm) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// needsTopology reports whether algorithm a needs to know each rank's
// node: it cannot run on ranks whose nodes are unknown.
func needsTopology(a allreduce.Algorithm) bool {
	blind := cost.Shape{Ranks: 2, Nodes: 1, LocalSize: 2, PeerMemory: true}
	return a != allreduce.Auto && !slices.Contains(runnable(blind), a)
}
