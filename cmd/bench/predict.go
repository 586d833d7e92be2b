package main

import (
	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// predictRow adds to rank 0's row what ran — for all-reduce the
// algorithm (auto's pick for auto), for broadcast and reduce the schedule,
// which the table's algo column names for auto — and the model's columns: on the simulator the bandwidth of the link a
// topology-blind algorithm pays (between nodes, or within the one node);
// with a model, the predicted time of what ran on the group's shape and
// the ratio of measured to predicted.
func predictRow(cfg *config, g *allreduce.Group, shape cost.Shape, r *row) {
	switch {
	case cfg.op.kind == allreduce.KindAllReduce:
		r.ran = g.AlgorithmFor(r.Bytes).String()
	case cfg.op.rooted:
		r.ran = g.RootedScheduleFor(cfg.op.kind, r.Bytes).String()
	}
	if cfg.model == nil {
		return
	}
	m := *cfg.model
	if cfg.transport == simTransport {
		l := m.Inter
		if shape.Nodes <= 1 {
			l = m.Intra
		}
		if l.Beta > 0 {
			bw := 1 / l.Beta / 1e9
			r.LinkGBps = &bw
		}
	}
	var seconds float64
	switch {
	case cfg.op.kind == allreduce.KindAllReduce:
		ran := g.AlgorithmFor(r.Bytes)
		r.Pick, r.shape = r.ran, shape
		t, ok := allreduce.PredictAlgorithm(m, shape, ran, r.Bytes)
		if !ok {
			return
		}
		seconds = t
	case cfg.op.rooted:
		ran := g.RootedScheduleFor(cfg.op.kind, r.Bytes)
		p, err := allreduce.PredictRooted(m, shape, cfg.op.kind, r.Bytes)
		if err != nil {
			return
		}
		r.Pick, seconds = r.ran, p.TreeSeconds
		if ran == allreduce.RootedChain {
			seconds = p.ChainSeconds
		}
	default:
		return
	}
	us := seconds * 1e6
	r.PredUS = &us
	if us > 0 {
		ratio := r.TimeUS / us
		r.Ratio = &ratio
	}
}
