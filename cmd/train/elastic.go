package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// Elastic training: -max-restarts and -min-ranks make a tcp job's launcher
// (every node's, with -nnodes; -rejoin-timeout) restart it after a
// failure (launch.Elastic) from the newest valid
// checkpoint of this job in -checkpoint's series (trainer.NewestCheckpoint;
// the job id: job.go), which -checkpoint-every and -checkpoint-keep write;
// -resume latest does the same choice for restart loops outside this
// command (docs/elastic.md).

const (
	resumeLatest = "latest" // -resume latest
	defaultKeep  = 2        // -checkpoint-keep with -checkpoint-every or -max-restarts
)

// elasticFlags checks -max-restarts and -min-ranks and returns them, the
// minimum resolved (default: every rank). They are the launcher's: a rank
// it started gets them too and ignores them.
func elasticFlags(tr *launch.Transport, maxRestarts, minRanks int, given map[string]bool, checkpoint string, getenv func(string) string, survive bool) (int, int, error) {
	switch {
	case maxRestarts < 0:
		return 0, 0, fmt.Errorf("-max-restarts %d: must not be negative", maxRestarts)
	case given["min-ranks"] && maxRestarts == 0 && !survive:
		return 0, 0, errors.New("-min-ranks applies with -max-restarts or -on-failure continue only")
	case maxRestarts == 0 && !survive:
		return 0, 0, nil
	case tr.MP == nil:
		return 0, 0, fmt.Errorf("-max-restarts applies to -transport tcp only: the launcher restarts the rank processes (in process, a failure is the whole job's)")
	case checkpoint == "" && maxRestarts > 0:
		return 0, 0, errors.New("-max-restarts needs -checkpoint: a restart resumes from the newest valid checkpoint written there")
	case !tr.MP.Launcher && getenv(launch.EnvRestart) == "":
		return 0, 0, fmt.Errorf("-max-restarts is for this command's own launcher, but this process is a rank of a %s-style job: "+
			"restart that job with its own tools and -resume latest (docs/elastic.md)", tr.MP.Env.Launcher)
	}
	if !given["min-ranks"] {
		minRanks = tr.Ranks
		if survive {
			minRanks = 1 // survivors go on down to one rank
		}
	}
	if minRanks < 1 || minRanks > tr.Ranks {
		what := "-ranks"
		if tr.MP.Nnodes > 1 {
			what = "-nnodes × -ranks"
		}
		return 0, 0, fmt.Errorf("-min-ranks %d: want 1..%d (%s)", minRanks, tr.Ranks, what)
	}
	return maxRestarts, minRanks, nil
}

// keepBatch is the world size of a restart that may run on lo..hi ranks,
// a multiple of unit (the ranks per node; 1 on one host): the largest
// that divides the global batch, so that every rank takes batch/ranks
// examples and the global batch is unchanged.
func keepBatch(batch, lo, hi, unit int) (int, error) {
	unit = max(unit, 1)
	for n := hi - hi%unit; n >= lo && n > 0; n -= unit {
		if batch%n == 0 {
			return n, nil
		}
	}
	if unit > 1 {
		return 0, fmt.Errorf("the global batch %d cannot be kept on %d..%d ranks in whole nodes of %d: none of those world sizes divides it (give -batch a multiple of the world sizes -min-ranks allows)", batch, lo, hi, unit)
	}
	return 0, fmt.Errorf("the global batch %d cannot be kept on %d..%d ranks: none of them divides it (give -batch a multiple of the world sizes -min-ranks allows)", batch, lo, hi)
}

// checkShrink reports a -min-ranks under which no smaller world keeps the
// global batch, before any training is done: ranks is the world size,
// unit the ranks per node (a multi-host job loses whole nodes).
func checkShrink(batch, minRanks, ranks, unit int) error {
	unit = max(unit, 1)
	if minRanks == 0 || minRanks > ranks-unit {
		return nil
	}
	if _, err := keepBatch(batch, minRanks, ranks-unit, unit); err != nil {
		return fmt.Errorf("-min-ranks %d: %w", minRanks, err)
	}
	return nil
}

// elastic is the launcher's restart policy for args, the job's command
// line; restarts are reported on the launcher's stdout.
func (o *options) elastic(args []string) *launch.Elastic {
	e := &launch.Elastic{
		MaxRestarts:   o.maxRestarts,
		MinRanks:      o.minRanks,
		RejoinTimeout: o.rejoinTimeout,
		LastCall:      o.lastCall,
		Prepare: func(_ context.Context, a launch.Attempt) (launch.Resume, error) {
			return o.prepareRestart(args, a)
		},
		OnRestart: func(w io.Writer, r launch.Restart) { printRestart(w, r, o.json) },
	}
	if o.survives() {
		o.continueOn(e)
	}
	return e
}

// prepareRestart is the command line of restart a: args resuming from the
// newest valid checkpoint (the job's own -resume, or the start, when there
// is none yet) on as many ranks as a allows that keep the global batch.
//
// With several nodes, node 0 chooses (a.Leader nil) and every node's
// command line gets -ranks (per node), -nnodes and -node-rank for the
// restart. The other nodes follow node 0's choice (a.Leader): they resume
// from the checkpoint of the name node 0 chose in their own -checkpoint
// directory — the same file when -checkpoint names one shared file on
// every node, as it must (docs/elastic.md) — and do not look for one
// themselves: they may see the shared directory later than node 0.
func (o *options) prepareRestart(args []string, a launch.Attempt) (launch.Resume, error) {
	next := slices.Clone(args)
	nodeArgs := func(r launch.Resume) []string {
		if a.RanksPerNode == 0 {
			return append(next, "-ranks", strconv.Itoa(r.Ranks))
		}
		return append(next, "-ranks", strconv.Itoa(a.RanksPerNode), "-nnodes", strconv.Itoa(r.Ranks/a.RanksPerNode),
			"-node-rank", strconv.Itoa(a.NodeRank))
	}
	if a.Leader != nil {
		r := *a.Leader
		if r.Found {
			r.From = filepath.Join(filepath.Dir(o.cfg.Checkpoint), filepath.Base(r.From))
			next = append(next, "-resume", r.From)
		}
		r.Args = nodeArgs(r)
		return r, nil
	}
	ranks, err := keepBatch(o.cfg.GlobalBatch, a.MinRanks, a.MaxRanks, a.RanksPerNode)
	if err != nil {
		return launch.Resume{}, err
	}
	found, err := trainer.NewestCheckpoint(o.cfg.Checkpoint, o.jobID)
	if err != nil {
		return launch.Resume{}, err
	}
	r := launch.Resume{Ranks: ranks, Notes: skippedNotes(found)}
	switch {
	case found.Path != "":
		next = append(next, "-resume", found.Path) // the last -resume given wins
		r.Step, r.From, r.Found = found.Info.GlobalStep, found.Path, true
	case o.resumed != nil:
		r.Step, r.From = o.resumed.GlobalStep, o.cfg.Resume
	}
	r.Args = nodeArgs(r)
	return r, nil
}

// restartRecord is a restart in -json output: one line, told from the
// epoch lines by its "restart" key.
type restartRecord struct {
	Restart         int      `json:"restart"` // 1 for the first
	FailedRank      int      `json:"failed_rank"`
	FailedPid       int      `json:"failed_pid,omitempty"`
	Reason          string   `json:"reason"`         // "was killed by signal killed", "exited with status 1"
	FailedAtStep    int64    `json:"failed_at_step"` // the last step done before the failure (-1: none reported)
	AtStartup       bool     `json:"at_startup"`     // the rank failed before its attempt's first step
	PreviousRanks   int      `json:"previous_ranks"`
	Ranks           int      `json:"ranks"` // the restart's world size
	ResumedFromStep int64    `json:"resumed_from_step"`
	Checkpoint      string   `json:"checkpoint"` // "" from the start
	StepsLost       int64    `json:"steps_lost"`
	Skipped         []string `json:"skipped,omitempty"` // checkpoints not taken (torn, ...)
	// TrainingAgainSeconds is from the failure to the restart's first step;
	// null when it failed before one.
	TrainingAgainSeconds *float64 `json:"training_again_seconds"`
	TrainingAgainUnix    *float64 `json:"training_again_unix,omitempty"`
	// With several nodes: the failed rank's node (its -node-rank at the
	// start), the node counts before and after, and the nodes dropped.
	FailedNode    *int          `json:"failed_node,omitempty"`
	PreviousNodes int           `json:"previous_nodes,omitempty"`
	Nodes         int           `json:"nodes,omitempty"`
	DroppedNodes  []droppedNode `json:"dropped_nodes,omitempty"`
}

// droppedNode is a node left out of a restart, in -json output.
type droppedNode struct {
	Node   int    `json:"node"`
	Reason string `json:"reason"`
}

func newRestartRecord(r launch.Restart) restartRecord {
	f := r.Failure
	rec := restartRecord{
		Restart: r.Number, FailedRank: f.Exit.Rank, FailedPid: f.Exit.Pid, Reason: f.Exit.Reason(),
		FailedAtStep: f.Step, AtStartup: f.AtStartup, PreviousRanks: f.Ranks, Ranks: r.Resume.Ranks,
		ResumedFromStep: r.Resume.Step, Checkpoint: r.Resume.From, StepsLost: r.StepsLost, Skipped: r.Resume.Notes,
	}
	if f.Nodes > 1 {
		node := f.Node
		rec.FailedNode, rec.PreviousNodes, rec.Nodes = &node, f.Nodes, r.Nodes
		for _, d := range r.Dropped {
			rec.DroppedNodes = append(rec.DroppedNodes, droppedNode{Node: d.Node, Reason: d.Reason})
		}
	}
	if !r.TrainingAgainAt.IsZero() {
		s := r.TrainingAgain.Seconds()
		u := float64(r.TrainingAgainAt.UnixNano()) / 1e9
		rec.TrainingAgainSeconds, rec.TrainingAgainUnix = &s, &u
	}
	return rec
}

// printRestart reports a restart: a JSON line with -json, else text.
func printRestart(w io.Writer, r launch.Restart, jsonOut bool) {
	rec := newRestartRecord(r)
	if jsonOut {
		b, err := json.Marshal(rec)
		if err == nil {
			fmt.Fprintf(w, "%s\n", b)
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "restart %d: %v (%s); ", r.Number, r.Failure, launch.Count(rec.PreviousRanks, "rank"))
	if rec.Checkpoint != "" {
		fmt.Fprintf(&b, "resumed from step %d (%s)", rec.ResumedFromStep, rec.Checkpoint)
	} else {
		b.WriteString("started again from the beginning (no checkpoint yet)")
	}
	fmt.Fprintf(&b, " on %s", launch.Count(rec.Ranks, "rank"))
	if rec.Nodes > 0 {
		fmt.Fprintf(&b, " (%s)", launch.Count(rec.Nodes, "node"))
	}
	fmt.Fprintf(&b, ", %s lost, ", launch.Count(int(rec.StepsLost), "step"))
	if rec.TrainingAgainSeconds != nil {
		fmt.Fprintf(&b, "training again %.2fs after the failure", *rec.TrainingAgainSeconds)
	} else {
		b.WriteString("but it failed before training again")
	}
	fmt.Fprintln(w, b.String())
	for _, d := range rec.DroppedNodes {
		fmt.Fprintf(w, "  node %d dropped: %s\n", d.Node, d.Reason)
	}
	for _, n := range rec.Skipped {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
