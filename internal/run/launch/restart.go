package launch

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// restartPolicy is the restart rule of an elastic job, apart from its I/O
// (after etcd-io/raft's RawNode: Step takes what happened and says what to
// do next; the caller does it). runElastic (one host) and lead (node 0 of
// several) run the attempts, wait, ask Elastic.Prepare and print; both
// hand every attempt's end to Step and Prepare's answer to Resume.
//
// The rule: an attempt whose ranks all exited 0, or that a signal or the
// caller stopped, ends the job. A failed one is restarted while restarts
// remain (Elastic.MaxRestarts, counted over the whole job). A failure
// before the attempt's first step (at start-up) is taken to be one that a
// restart would repeat: the restart may run without the failed rank (one
// host) or its node (several nodes, never node 0), down to
// Elastic.MinRanks, and waits a backoff that doubles with every start-up
// failure in a row. With several nodes, a restart needs MinRanks on the
// nodes left, and runs on whole nodes: those beyond Prepare's world size
// are dropped from the highest.
type restartPolicy struct {
	maxRestarts int
	minRanks    int
	perNode     int // ranks per node with several nodes; 0 on one host
	ranks       int // one host: the world size of the attempt running

	failures []Failure // every attempt's, in order
	startups int       // start-up failures in a row
	ask      Attempt   // what the restart being prepared asked Prepare
	members  []int     // several nodes: the restart's nodes so far
	dropped  []DroppedNode
}

// newRestartPolicy is the policy of e for a job that starts on ranks
// ranks, perNode of them a node (0: on one host).
func newRestartPolicy(e *Elastic, ranks, perNode int) *restartPolicy {
	return &restartPolicy{maxRestarts: e.MaxRestarts, minRanks: e.MinRanks, perNode: perNode, ranks: ranks}
}

// attemptEnd is how an attempt ended, as its launcher saw it.
type attemptEnd struct {
	// Err is how the attempt ended on this launcher (nil: its ranks exited
	// 0); it is the job's error when the job ends without a restart.
	Err error
	// Clean: every rank of the attempt exited 0 (of every node that came
	// back).
	Clean bool
	// Stopped says why no restart may follow whatever the ranks did (a
	// signal, the caller); "" when none did.
	Stopped string
	// Failure is the failure to blame when the attempt is neither clean nor
	// stopped.
	Failure Failure
	// With several nodes: the nodes that came back, node 0 first, and
	// those lost, with the reason.
	Members []int
	Dropped []DroppedNode
}

// restartStep is what the policy says to do after an attempt's end.
type restartStep struct {
	// Backoff, when > 0, is the number of start-up failures in a row: wait
	// the backoff they call for before doing the rest.
	Backoff int
	// Done ends the job with Err (nil: it succeeded).
	Done bool
	Err  error
	// Ask is what to ask Elastic.Prepare for the restart, when not Done;
	// Prepare's answer goes to Resume.
	Ask Attempt
	// Dropped: with several nodes, the nodes left out of the restart so
	// far, with the reason.
	Dropped []DroppedNode
}

// Step takes an attempt's end and says whether the job ends or is
// restarted, and how.
func (p *restartPolicy) Step(end attemptEnd) restartStep {
	if end.Stopped != "" {
		err := end.Err
		if err == nil && !end.Clean {
			err = fmt.Errorf("launch: %s, and the job did not end cleanly: not restarting it", end.Stopped)
		}
		return restartStep{Done: true, Err: err}
	}
	if end.Clean {
		return restartStep{Done: true}
	}
	f := end.Failure
	p.failures = append(p.failures, f)
	if p.maxRestarts == 0 { // a job of several nodes without restarts: its failure, as is
		return restartStep{Done: true, Err: fmt.Errorf("launch: %w%s", f.Exit, strings.TrimPrefix(f.String(), f.Exit.Error()))}
	}
	if len(p.failures) > p.maxRestarts {
		return restartStep{Done: true, Err: fmt.Errorf("launch: %w", &RestartsExhaustedError{MaxRestarts: p.maxRestarts, Failures: p.failures})}
	}
	p.members, p.dropped = slices.Clone(end.Members), slices.Clone(end.Dropped)
	maxRanks := p.ranks
	if p.perNode > 0 {
		maxRanks = len(p.members) * p.perNode
	}
	var step restartStep
	if f.AtStartup {
		p.startups++
		step.Backoff = p.startups
		switch {
		case p.perNode == 0 && maxRanks > p.minRanks:
			maxRanks--
		case p.perNode > 0 && f.Node != 0 && slices.Contains(p.members, f.Node) && maxRanks-p.perNode >= p.minRanks:
			p.members = slices.DeleteFunc(p.members, func(m int) bool { return m == f.Node })
			p.dropped = append(p.dropped, DroppedNode{Node: f.Node, Reason: "its rank failed at start-up"})
			maxRanks -= p.perNode
		}
	} else {
		p.startups = 0
	}
	step.Dropped = p.dropped
	if maxRanks < p.minRanks {
		step.Done = true
		step.Err = fmt.Errorf("launch: after %s: %s; the nodes left (%s) run %s, fewer than the minimum of %d (-min-ranks)",
			f, droppedText(p.dropped), intsText(p.members), Count(maxRanks, "rank"), p.minRanks)
		return step
	}
	p.ask = Attempt{Restart: len(p.failures), MinRanks: p.minRanks, MaxRanks: maxRanks, Failure: f, RanksPerNode: p.perNode}
	step.Ask = p.ask
	return step
}

// Resume takes Elastic.Prepare's answer to the last Step's Ask (res, or
// err) and returns the restart, with its nodes (several nodes), or the
// error that ends the job.
func (p *restartPolicy) Resume(res Resume, err error) (Restart, []int, error) {
	a := p.ask
	f := a.Failure
	switch {
	case err != nil:
	case p.perNode == 0 && (res.Ranks < a.MinRanks || res.Ranks > a.MaxRanks):
		err = fmt.Errorf("%d ranks asked for, want %d..%d", res.Ranks, a.MinRanks, a.MaxRanks)
	case p.perNode > 0 && (res.Ranks < a.MinRanks || res.Ranks > a.MaxRanks || res.Ranks%p.perNode != 0):
		err = fmt.Errorf("%d ranks asked for, want a multiple of %d in %d..%d", res.Ranks, p.perNode, a.MinRanks, a.MaxRanks)
	}
	if err != nil {
		return Restart{}, nil, fmt.Errorf("launch: restarting after %s: %w", f, err)
	}
	r := Restart{Number: a.Restart, Failure: f, Resume: res}
	if f.Step >= 0 {
		r.StepsLost = max(0, f.Step-res.Step)
	}
	p.ranks = res.Ranks
	if p.perNode == 0 {
		return r, nil, nil
	}
	k := res.Ranks / p.perNode
	for _, m := range p.members[k:] {
		p.dropped = append(p.dropped, DroppedNode{Node: m, Reason: "the global batch is kept on fewer nodes"})
	}
	r.Nodes, r.Dropped = k, p.dropped
	return r, p.members[:k], nil
}

// resumeText words where a restart resumes from, for the launcher's
// restart line.
func resumeText(res Resume) string {
	if res.From == "" {
		return "starting again from the beginning"
	}
	return "resuming from step " + strconv.FormatInt(res.Step, 10)
}

// restartReport holds a restart until Elastic.OnRestart is told of it:
// when its first step is done, or when it ended without one.
type restartReport struct {
	pending   *Restart
	onRestart func(io.Writer, Restart)
	w         io.Writer
}

// report tells OnRestart of the pending restart, if any; trainedAt is its
// first step's time (zero: none).
func (r *restartReport) report(trainedAt time.Time) {
	if r.pending == nil {
		return
	}
	if !trainedAt.IsZero() {
		r.pending.TrainingAgainAt = trainedAt
		r.pending.TrainingAgain = trainedAt.Sub(r.pending.Failure.At)
	}
	if r.onRestart != nil {
		r.onRestart(r.w, *r.pending)
	}
	r.pending = nil
}
