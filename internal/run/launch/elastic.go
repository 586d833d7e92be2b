package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Elastic restarts. With Config.Elastic.MaxRestarts > 0, when a rank fails
// the launcher stops the others (as without restarts), then, while
// restarts remain, starts the job again: a fresh store port, secret and run
// id, RINGDDP_RESTART set to the restart count, and the world size and
// arguments Elastic.Prepare returns (a command resumes from its newest
// checkpoint there). The world keeps its size when the failed rank can be
// restarted. A rank that failed before its attempt's first step (reported
// on the status pipe, status.go) is taken to be one that cannot: the next
// attempt may run one rank fewer, down to MinRanks, and ranks are
// renumbered 0..n-1. Restarts after such start-up failures wait a backoff
// that doubles with each one in a row, and all restarts together are
// bounded by MaxRestarts: a rank that fails at start-up over and over ends
// the job once they are spent, with an error naming every failure.
//
// With several nodes (Config.Nnodes > 1) every node's launcher takes part
// in each restart through a rendezvous of launchers that node 0's launcher
// hosts (nodes.go): node 0 chooses the checkpoint and the world size, the
// nodes that come back within RejoinTimeout are renumbered, and a node
// whose rank fails tells the others, so that all stop and restart
// together.

// Defaults of Elastic.
const (
	DefaultBackoff       = 500 * time.Millisecond
	DefaultRejoinTimeout = 30 * time.Second
	DefaultJoinTimeout   = 5 * time.Minute
)

// Elastic configures the restarts of a failed job.
type Elastic struct {
	// MaxRestarts is how many times the job may be started again after a
	// failure; 0 runs it once.
	MaxRestarts int
	// MinRanks is the fewest ranks a restart may run on (0: Config.Ranks,
	// never fewer).
	MinRanks int
	// Prepare is called before every restart with what ended the last
	// attempt and the world sizes it may choose from; it returns the
	// restart's world size and arguments. An error ends the job.
	Prepare func(ctx context.Context, a Attempt) (Resume, error)
	// OnRestart, if set, is called once per restart: when its first step
	// is done, or when it ended without one (Restart.TrainingAgain zero).
	// w is the launcher's stdout, whose writes are serialised with the
	// ranks' forwarded lines.
	OnRestart func(w io.Writer, r Restart)
	// Backoff is the wait before a restart that follows a start-up
	// failure, doubled for each such failure in a row, at most 16 times
	// Backoff. Default DefaultBackoff. Restarts after a failure in
	// training are immediate.
	Backoff time.Duration
	// RejoinTimeout, with several nodes, is how long node 0's launcher
	// waits, after an attempt has ended on its node, for the other nodes'
	// launchers to come back; a node that has not is dropped (if MinRanks
	// allows). Default DefaultRejoinTimeout.
	RejoinTimeout time.Duration
	// Continue keeps the job running after a rank fails (-on-failure
	// continue, one host): the survivors go on in the same processes as
	// the next generation of the group (survive.go, survive_lead.go),
	// down to MinRanks; below it, or when Fits refuses the survivors'
	// number, the job falls back to a restart (MaxRestarts) or ends.
	Continue bool
	// CheckIn is how long after a failure the launcher waits for the
	// members to check in; those that have not are removed. Default
	// DefaultCheckIn.
	CheckIn time.Duration
	// Fits, if set, says whether the job can continue on n ranks: nil, or
	// why not (the global batch does not divide over n).
	Fits func(n int) error
	// Survives, if set, says whether the job's state survives losing the
	// ranks lost of members (job-wide names, in the current generation's
	// order), nodes[i] the node members[i] runs on (nil on one host): nil,
	// or why not (a ZeRO-1 rank lost with its buddy).
	Survives func(members, nodes, lost []int) error
	// OnContinue, if set, is called once per failure survived, when the
	// new generation's first step is done (Continued.TrainingAgain zero:
	// the attempt ended before one). w is as for OnRestart.
	OnContinue func(w io.Writer, c Continued)
	// Heal, with Continue, starts a replacement for every rank lost (or
	// takes a spare) and grows the group back at a step boundary; the new
	// rank heals from the members (survive_grow.go). Spares is how many
	// ranks to start with the job that wait, ready, to be taken.
	Heal   bool
	Spares int
	// JobID, with several nodes, is the job's id as node 0's launcher
	// names it (cmd/train's -job-id): node 0's plans carry it, and the
	// ranks of the other nodes get it as EnvJobID, so that every rank —
	// a rejoining node's too — names the same job (heal checks it).
	JobID string
	// JoinTimeout, with several nodes, is how long node 0's launcher waits
	// for every node's launcher to join before the first attempt, and the
	// others for node 0's. Default Config.JoinTimeout, else
	// DefaultJoinTimeout.
	JoinTimeout time.Duration
	// LastCall, with -nnodes MIN:MAX (MIN < MAX), is how long node 0's
	// launcher waits, once nodes 0..MIN-1 have joined, for nodes
	// MIN..MAX-1 to join the first attempt (nodes_lastcall.go); 0: none.
	LastCall time.Duration
}

// check validates e for cfg and fills in its defaults.
func (e *Elastic) check(cfg Config) error {
	if e.RejoinTimeout < 0 || e.JoinTimeout < 0 {
		return errors.New("launch: negative rejoin or join timeout")
	}
	if e.RejoinTimeout == 0 {
		e.RejoinTimeout = DefaultRejoinTimeout
	}
	if e.JoinTimeout == 0 {
		e.JoinTimeout = cmp.Or(cfg.JoinTimeout, DefaultJoinTimeout)
	}
	if e.CheckIn <= 0 {
		e.CheckIn = DefaultCheckIn
	}
	if err := e.checkHeal(); err != nil {
		return err
	}
	if err := e.checkScaleUp(cfg); err != nil {
		return err
	}
	switch {
	case e.MaxRestarts < 0:
		return fmt.Errorf("launch: max restarts %d: must not be negative", e.MaxRestarts)
	case e.MaxRestarts == 0 && !e.Continue:
		return nil
	case e.MinRanks < 0 || e.MinRanks > cfg.Nnodes*cfg.Ranks:
		return fmt.Errorf("launch: min ranks %d: want 1..%d (the ranks the job starts with)", e.MinRanks, cfg.Nnodes*cfg.Ranks)
	case e.Prepare == nil && e.MaxRestarts > 0:
		return errors.New("launch: restarts need Elastic.Prepare")
	case cfg.mostNodes() > 1 && cfg.Master == "":
		return fmt.Errorf("launch: %d nodes restarting together need the master's host:port, where node 0's launcher hosts their rendezvous", cfg.Nnodes)
	}
	if e.MinRanks == 0 {
		e.MinRanks = cfg.Nnodes * cfg.Ranks
	}
	if e.Backoff <= 0 {
		e.Backoff = DefaultBackoff
	}
	return nil
}

// Failure is what ended one attempt: its first rank to fail.
type Failure struct {
	Attempt int        // 0 for the first start
	Ranks   int        // the attempt's world size
	Exit    *ExitError // the rank, its pid and how it ended
	// Node is the failed rank's node: its -node-rank when the job started
	// (0 on one host); Nodes is the attempt's node count (0 on one host).
	Node, Nodes int
	StartStep   int64     // the global step the attempt started at (-1: not reported)
	Step        int64     // the last global step reported done (-1: none reported)
	AtStartup   bool      // before the attempt's first step
	At          time.Time // when the launcher saw it
}

// String says which rank failed, how and where: "rank 1 (pid 42) was
// killed by signal killed at step 57". A lost node names itself, and is
// said to be lost at start-up only when the ranks reported their start
// (a job that reports no progress, as cmd/bench, cannot tell).
func (f Failure) String() string {
	s := f.Exit.Error()
	_, lost := f.Exit.Err.(*NodeLostError)
	if f.Nodes > 1 && !lost {
		s += " on node " + strconv.Itoa(f.Node)
	}
	switch {
	case f.AtStartup && lost && f.StartStep < 0:
	case f.AtStartup:
		s += " at start-up"
	case f.Step >= 0:
		s += " at step " + strconv.FormatInt(f.Step, 10)
	}
	return s
}

// Attempt is what Elastic.Prepare gets: the restart to prepare and the
// failure that made it necessary.
type Attempt struct {
	Restart  int // 1 for the first restart
	MinRanks int
	// MaxRanks is the most ranks the restart may run on: the failed
	// attempt's, less the failed rank if it failed at start-up (and
	// MinRanks allows).
	MaxRanks int
	Failure  Failure

	// With several nodes: Prepare's world size must be a multiple of
	// RanksPerNode (0 on one host), and Prepare is called on every node.
	// On node 0 Leader is nil and Prepare chooses; on the others Leader is
	// node 0's choice (Ranks, Step, From, Found, Notes), which Prepare
	// follows with this node's arguments, and NodeRank is this node's rank
	// in the restart.
	RanksPerNode int
	NodeRank     int
	Leader       *Resume
}

// Resume is Elastic.Prepare's answer: how the restart runs.
type Resume struct {
	Ranks int      // the world size, MinRanks..MaxRanks
	Args  []string // the ranks' arguments
	Env   []string // if not nil, replaces Config.Env from this restart on
	Step  int64    // the global step it resumes from (for the report)
	From  string   // the checkpoint it resumes from ("" none)
	// Found says that From was chosen for this restart (the newest valid
	// checkpoint), as opposed to the job's own -resume, which every
	// node's command line has already.
	Found bool
	// Notes are reported with the restart (checkpoints skipped, ...).
	Notes []string
}

// Restart is one restart, as reported to Elastic.OnRestart.
type Restart struct {
	Number    int // 1 for the first restart
	Failure   Failure
	Resume    Resume
	StepsLost int64 // the failure's step less the step resumed from
	// TrainingAgain is the time from the failure to the restarted job's
	// first step; zero when it ended before one.
	TrainingAgain   time.Duration
	TrainingAgainAt time.Time
	// With several nodes: the restart's node count and the nodes (by
	// their -node-rank at the start) dropped from the job at this restart,
	// each with the reason.
	Nodes   int
	Dropped []DroppedNode
}

// DroppedNode is a node left out of a restart.
type DroppedNode struct {
	Node   int    // its -node-rank when the job started
	Reason string // "did not come back within 30s", "failed at start-up", ...
}

// RestartsExhaustedError is an elastic job's failure once no restart is
// left: every attempt's failure, in order.
type RestartsExhaustedError struct {
	MaxRestarts int
	Failures    []Failure
}

func (e *RestartsExhaustedError) Error() string {
	parts := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		parts[i] = fmt.Sprintf("attempt %d (%s): %v", f.Attempt+1, Count(f.Ranks, "rank"), f)
	}
	return fmt.Sprintf("the job failed %d times and no restart is left (max restarts %d): %s",
		len(e.Failures), e.MaxRestarts, strings.Join(parts, "; "))
}

// Unwrap is every failure's *ExitError.
func (e *RestartsExhaustedError) Unwrap() []error {
	errs := make([]error, len(e.Failures))
	for i, f := range e.Failures {
		errs[i] = f.Exit
	}
	return errs
}

// runElastic runs the job, restarting it after failures as cfg.Elastic
// says.
func runElastic(ctx context.Context, cfg Config, w outputs, sigs chan os.Signal) error {
	if cfg.Nnodes > 1 {
		return runNodes(ctx, cfg, w, sigs)
	}
	e := cfg.Elastic
	a := attempt{ranks: cfg.Ranks, args: cfg.Args}
	policy := newRestartPolicy(e, cfg.Ranks, 0)
	rep := &restartReport{onRestart: e.OnRestart, w: w.out}
	survived := 0 // failures survived, over the job
	for n := 0; ; n++ {
		a.env = []string{EnvRestart + "=" + strconv.Itoa(n)}
		a.getenv = restartGetenv(cfg.Getenv, n)
		a.survive = nil
		if e.Continue {
			a.survive = &survival{e: e, w: w.out, errOut: w.errOut, counted: &survived}
		}
		j, prog, err := startWithStatus(cfg, w, a)
		if err != nil {
			a.survive.close()
			return err
		}
		j.progress = prog.notify
		j.onProgress = func() {
			_, _, at := prog.snapshot()
			rep.report(at)
		}
		err = j.wait(ctx, sigs)
		select {
		case <-prog.done:
		case <-time.After(cfg.Grace): // something a rank started still holds the pipe
		}
		a.survive.close()
		start, last, trainedAt := prog.snapshot()
		rep.report(trainedAt)
		end := attemptEnd{Err: err, Clean: err == nil}
		if j.first == nil || j.signaled != nil || ctx.Err() != nil {
			end.Stopped = "nothing to restart" // stopped by a signal or ctx, or no rank failed
		} else {
			end.Failure = Failure{Attempt: n, Ranks: a.ranks, Exit: j.culprit(), StartStep: start, Step: last,
				AtStartup: trainedAt.IsZero(), At: j.failedAt}
		}
		step := policy.Step(end)
		if step.Backoff > 0 {
			if err := backoff(ctx, sigs, e.Backoff, step.Backoff); err != nil {
				return fmt.Errorf("launch: %w (after %s)", err, end.Failure)
			}
		}
		if step.Done {
			return step.Err
		}
		r, _, err := policy.Resume(e.Prepare(ctx, step.Ask))
		if err != nil {
			return err
		}
		rep.pending = &r
		fmt.Fprintf(w.errOut, "launch: restart %d of at most %d after %s: %s on %s (%s lost)\n",
			r.Number, e.MaxRestarts, r.Failure, resumeText(r.Resume), Count(r.Resume.Ranks, "rank"), Count(int(r.StepsLost), "step"))
		a.ranks, a.args = r.Resume.Ranks, r.Resume.Args
		if r.Resume.Env != nil {
			cfg.Env = r.Resume.Env
		}
	}
}

// startWithStatus starts a with a fresh status pipe, read into the
// returned progress until every rank has closed it.
func startWithStatus(cfg Config, w outputs, a attempt) (*job, *progress, error) {
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("launch: the status pipe: %w", err)
	}
	a.status = pw
	prog := newProgress()
	if a.survive != nil {
		a.survive.prog = prog
	}
	j, err := startAttempt(cfg, w, a)
	pw.Close() // the ranks hold their copies
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	go func() {
		prog.read(r)
		r.Close()
	}()
	return j, prog, nil
}

// backoff waits before the restart after the k-th start-up failure in a
// row: base doubled k-1 times, at most 16 times base. A signal or ctx ends
// the wait with an error.
func backoff(ctx context.Context, sigs chan os.Signal, base time.Duration, k int) error {
	d := base << min(k-1, 4)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case s := <-sigs:
		return fmt.Errorf("stopped by %v before restarting", s)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restartGetenv is getenv for attempt n: a run id set in the environment
// gets "-restart<n>" appended from the first restart on, so that no key of
// an earlier attempt's store is taken for this one's.
func restartGetenv(getenv func(string) string, n int) func(string) string {
	if n == 0 {
		return getenv
	}
	return func(k string) string {
		v := getenv(k)
		if k == EnvRunID && v != "" {
			v += "-restart" + strconv.Itoa(n)
		}
		return v
	}
}
