package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// explanation is one size of -explain: every runnable algorithm's
// predicted time and auto's pick. Its JSON keys (-explain -json) are
// stable.
type explanation struct {
	Bytes       int                `json:"bytes"`
	PredictedUS map[string]float64 `json:"predicted_us"`
	Pick        string             `json:"pick"`
	// ChosenAt is the size the pick was chosen at: a group chooses once
	// per power-of-two size class, at its lower end
	// (allreduce.ChoiceBytes), so that Pick is what a call of Bytes runs.
	ChosenAt int `json:"chosen_at"`
}

// explain prints, for every size of the sweep, each all-reduce algorithm
// that can run on the flags' shape (plannedShape) with its predicted time
// under the run's model (the profile, the model flags, the simulator's
// defaults, else cost.DefaultModel), and the algorithm Auto picks
// (allreduce.Choose: the same decision a group's call makes, at the
// lower end of the size's power-of-two class, so the pick is what runs;
// the starred prediction is then the least at that size, not always at
// this one). It runs nothing.
func explain(cfg *config, w io.Writer) error {
	if cfg.op.kind == allreduce.KindBroadcast || cfg.op.kind == allreduce.KindReduce {
		return explainRooted(cfg, w) // checkModes refused the other collectives
	}
	m, from := cfg.explainModel()
	shape := plannedShape(cfg)
	algos := runnable(shape)
	var enc *json.Encoder
	if cfg.json {
		enc = json.NewEncoder(w)
	} else if err := explainHeader(cfg, w, m, from, shape, algos); err != nil {
		return err
	}
	for _, size := range cfg.sizes() {
		bytes := cfg.count(size) * cfg.dtype.Size()
		preds := allreduce.Predict(m, shape, bytes)
		pick := allreduce.Choose(m, shape, bytes)
		if enc != nil {
			e := explanation{Bytes: bytes, PredictedUS: map[string]float64{}, Pick: pick.String(), ChosenAt: allreduce.ChoiceBytes(bytes)}
			for _, p := range preds {
				e.PredictedUS[p.Algorithm.String()] = p.Seconds * 1e6
			}
			if err := enc.Encode(e); err != nil {
				return err
			}
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%13d", bytes)
		for _, p := range preds {
			mark := " "
			if p.Algorithm == pick {
				mark = "*"
			}
			fmt.Fprintf(&b, " %13.2f%s", p.Seconds*1e6, mark)
		}
		fmt.Fprintf(&b, " %12s\n", pick)
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// explainHeader says what the table predicts with and names its columns.
func explainHeader(cfg *config, w io.Writer, m cost.Model, from string, shape cost.Shape, algos []allreduce.Algorithm) error {
	topo := "topology unknown"
	if shape.Topology {
		topo = fmt.Sprintf("%s of up to %s", launch.Count(shape.Nodes, "node"), launch.Count(shape.LocalSize, "rank"))
	}
	var names, units strings.Builder
	fmt.Fprintf(&names, "#%12s", "size")
	fmt.Fprintf(&units, "#%12s", "(B)")
	for _, a := range algos {
		fmt.Fprintf(&names, " %14s", a)
		fmt.Fprintf(&units, " %14s", "(us)")
	}
	fmt.Fprintf(&names, " %12s", "pick")
	_, err := fmt.Fprintf(w,
		"# ringddp bench -explain: allreduce of %s on %d ranks (%s; ranks share memory: %v), transport %s\n"+
			"# model: %s (%s)\n"+
			"# predicted time of every algorithm that can run (allreduce.Predict), * and pick: what auto runs (allreduce.Choose,\n"+
			"#   chosen once per power-of-two size class at its lower end, as a group chooses)\n"+
			"#\n%s\n%s\n",
		cfg.dtype, shape.Ranks, topo, shape.PeerMemory, cfg.transport, describeModel(m), from, names.String(), units.String())
	return err
}

// explainRooted is -explain for -op broadcast and reduce: per size, the
// binomial tree's and the pipelined chain's predicted times and the one a
// group runs (allreduce.PredictRooted), as JSON the same explanation
// objects with the schedules "tree" and "chain" (the chain absent below
// three ranks).
func explainRooted(cfg *config, w io.Writer) error {
	m, from := cfg.explainModel()
	shape := plannedShape(cfg)
	var enc *json.Encoder
	if cfg.json {
		enc = json.NewEncoder(w)
	} else if _, err := fmt.Fprintf(w,
		"# ringddp bench -explain: %s of %s on %d ranks (ranks share memory: %v), transport %s\n"+
			"# model: %s (%s)\n"+
			"# predicted time of the binomial tree and of the pipelined chain, agreement step included (allreduce.PredictRooted), * and pick: what a group runs\n"+
			"#\n#%12s %14s %14s %12s\n#%12s %14s %14s\n",
		cfg.op.name, cfg.dtype, shape.Ranks, shape.PeerMemory, cfg.transport, describeModel(m), from,
		"size", "tree", "chain", "pick", "(B)", "(us)", "(us)"); err != nil {
		return err
	}
	for _, size := range cfg.sizes() {
		bytes := cfg.count(size) * cfg.dtype.Size()
		p, err := allreduce.PredictRooted(m, shape, cfg.op.kind, bytes)
		if err != nil {
			return err
		}
		pick := "tree"
		if p.Chain {
			pick = "chain"
		}
		if enc != nil {
			e := explanation{Bytes: bytes, PredictedUS: map[string]float64{"tree": p.TreeSeconds * 1e6}, Pick: pick}
			if !math.IsInf(p.ChainSeconds, 1) {
				e.PredictedUS["chain"] = p.ChainSeconds * 1e6
			}
			if err := enc.Encode(e); err != nil {
				return err
			}
			continue
		}
		mark := func(chain bool) string {
			if chain == p.Chain {
				return "*"
			}
			return " "
		}
		chain := "-"
		if !math.IsInf(p.ChainSeconds, 1) {
			chain = fmt.Sprintf("%.2f", p.ChainSeconds*1e6)
		}
		if _, err := fmt.Fprintf(w, "%13d %13.2f%s %13s%s %12s\n", bytes, p.TreeSeconds*1e6, mark(false), chain, mark(true), pick); err != nil {
			return err
		}
	}
	return nil
}
