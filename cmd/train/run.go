package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/internal/blas"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
	"github.com/ringddp/ringddp/internal/trace"
)

// runEnv is what the command runs with besides its arguments.
type runEnv struct {
	// ranks is the command of a -transport tcp job's ranks.
	ranks launch.RankCommand
	// adjust, if set, changes the trainer's configuration before training
	// (the tests' fault injection).
	adjust func(*trainer.Config)
	// runsDir, if set, is where a run that holds rank 0 writes its -out
	// files when -out is not given, in a directory of its own (newRunDir).
	runsDir string
}

// run parses args, trains, and writes the report to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return runWith(ctx, args, stdout, runEnv{ranks: launch.ThisProgram})
}

// runWith is run in env: a -transport tcp launcher launches the job's
// ranks (launchJob); anything else trains as one rank or as the in-process
// ranks (train).
func runWith(ctx context.Context, args []string, stdout io.Writer, env runEnv) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	if o == nil { // -h
		return nil
	}
	if o.exportData != "" {
		return exportData(ctx, o.exportData, stdout)
	}
	if o.finished != "" {
		w := stdout
		if o.json {
			w = os.Stderr
		}
		if o.tr.HoldsRank0() {
			fmt.Fprintln(w, o.finished)
		}
		return nil
	}
	if o.tr.Launcher() { // -transport tcp, not under a launcher: be one
		if !o.jobIDMade || !o.heal || o.tr.MP.NodeRank == 0 {
			args = withJobID(args, o.jobID)
		} // else: this node's ranks take node 0's job id, which heal checks (launch.EnvJobID)
		return launchJob(ctx, o, args, stdout, env)
	}
	return train(ctx, o, stdout, env)
}

// launchJob launches a -transport tcp job's ranks and merges their traces.
// Rank 0's stdout is the job's report. Ctrl-C is forwarded to the ranks,
// which stop after the same step (and write the checkpoint) as in-process
// ranks do.
func launchJob(ctx context.Context, o *options, args []string, stdout io.Writer, env runEnv) error {
	var err error
	if o.maxRestarts > 0 || o.survives() {
		err = o.tr.LaunchElastic(ctx, args, env.ranks, stdout, o.elastic(args))
	} else {
		err = o.tr.Launch(ctx, args, env.ranks, stdout)
	}
	return mergeTrace(o, err)
}

// train sets this process up (cores, binding, status pipe, BLAS, CPU
// profile, -out), trains with the report's hooks, and prints the summary.
func train(ctx context.Context, o *options, stdout io.Writer, env runEnv) (err error) {
	o.tr.ShareCores() // a tcp rank under another launcher: its share of the cores
	if _, err := o.tr.Bind(); err != nil {
		return err
	}
	// Under an elastic launcher, rank 0 reports its progress on the status
	// pipe: where a failure lost it, when a restart trains again.
	status, err := launch.OpenStatus(os.Getenv)
	if err != nil {
		return err
	}
	defer status.Close()
	if o.blas, err = blas.Setup(gemmThreads(o.tr)); err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	start := time.Now()
	if err := o.outDir(env.runsDir, start); err != nil {
		return err
	}
	cfg := o.cfg
	rep := &report{o: o, stdout: stdout, status: status, cfg: &cfg,
		prog: chooseProgress(stdout, o.json, o.quiet), writer: &outWriter{dir: o.out}, start: start}
	cfg.OnStart, cfg.OnStep, cfg.OnEpoch = rep.started, rep.stepped, rep.epoch
	cfg.OnSurvive = func(_ rendezvous.Generation, step int64, reshardSent []int64) { status.Resumed(step, reshardSent) }
	surv, err := o.tr.Survivor(ctx) // with -on-failure continue
	if err != nil {
		return err
	}
	if surv != nil {
		defer surv.Close()
		cfg.Survive, cfg.Connect = surv, surv.Connect
		cfg.OnHeal = func(h trainer.Healed) { printHealed(ctx, stdout, surv, h, o) }
	}
	cfg.Connect = keepConn(cfg.Connect, &rep.conn)
	if !o.json && !o.quiet && o.tr.HoldsRank0() {
		for _, n := range o.resumeNotes {
			fmt.Fprintf(stdout, "-resume latest: %s\n", n)
		}
		for _, n := range o.notes {
			fmt.Fprintln(stdout, n)
		}
	}
	if env.adjust != nil {
		env.adjust(&cfg)
	}
	res, err := trainer.Run(ctx, cfg)
	rep.prog.done()
	rep.finishOutputs(err)
	if errors.Is(err, datasets.ErrBundledMNISTUnavailable) {
		return fmt.Errorf("%w\n%s", err, noBundledMNISTHint)
	}
	if err != nil {
		if res != nil && res.Checkpoint != "" {
			return fmt.Errorf("%w (checkpoint written to %s; resume with -resume %s)", err, res.Checkpoint, res.Checkpoint)
		}
		return err
	}
	if rep.outErr != nil {
		return fmt.Errorf("-out: %w", rep.outErr)
	}
	holds := o.tr.HoldsRank0()
	if cfg.Survive != nil {
		holds = res.Rank == 0 // rank 0 may have been lost and another taken its place
	}
	if !o.json && holds {
		printSummary(stdout, res, o, time.Since(start))
	} else if holds {
		printWritten(os.Stderr, o, len(res.Epochs) > 0) // stdout carries the JSON lines only
	}
	return nil
}

// report is the training's hooks (trainer.Config's OnStart, OnStep and
// OnEpoch): the progress, the status pipe, the per-epoch lines and the
// -out files.
type report struct {
	o      *options
	stdout io.Writer
	status *launch.Status
	prog   progress
	cfg    *trainer.Config // the configuration trained with, for its epochs
	writer *outWriter      // writes the -out files
	start  time.Time       // when the run started: its id on the plots and in runs/
	conn   transport.Conn  // this process's first endpoint, for the plan (keepConn)

	all    []trainer.EpochMetrics
	losses []stepLoss // every step's loss, for the plot
	outErr error      // the first error writing the report or -out
}

// started prints the plan (text output) and reports the start.
func (r *report) started(p trainer.Plan) {
	if !r.o.json && !r.o.quiet {
		printPlan(r.stdout, p, r.o, r.conn)
	}
	r.writer.title = runTitle(p, r.o.tr.Name, r.cfg.Zero1, r.start)
	r.prog.plan(p)
	r.status.Started(p.GlobalStep)
}

// stepped records the step's loss for -out and reports the step.
func (r *report) stepped(s trainer.StepInfo) {
	if r.o.out != "" {
		r.losses = append(r.losses, stepLoss{x: float64(s.GlobalStep) / float64(max(1, s.StepsPerEpoch)), loss: s.Loss})
	}
	r.prog.step(s)
	r.status.Stepped(s.GlobalStep)
}

// epoch prints the epoch's line (text or JSON) and has the -out files
// rewritten.
func (r *report) epoch(m trainer.EpochMetrics) {
	r.prog.done()
	r.all = append(r.all, m)
	if r.o.json {
		b, err := json.Marshal(m)
		if err != nil && r.outErr == nil {
			r.outErr = err
		}
		fmt.Fprintf(r.stdout, "%s\n", b)
	} else {
		printEpoch(r.stdout, m, r.cfg.Epochs)
	}
	if r.o.out != "" {
		r.writer.submit(r.all, r.losses)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// printPlan prints the run's plan: what trains on what (the transport
// -transport auto chose), the batch and optimizer, and the all-reduce
// algorithm of the buckets (what auto chose, under which cost model).
func printPlan(w io.Writer, p trainer.Plan, o *options, conn transport.Conn) {
	opt := fmt.Sprintf("%s lr %g", p.Optim, p.LR)
	if p.Optim == trainer.OptimSGD {
		opt += fmt.Sprintf(" momentum %g", p.Momentum)
	}
	if p.WeightDecay != 0 {
		opt += fmt.Sprintf(" weight decay %g", p.WeightDecay)
	}
	mode := "DDP"
	if o.cfg.Zero1 {
		mode = "ZeRO-1"
	}
	tr, why := transportLabel(o.tr.Name, conn)
	fmt.Fprintf(w, "training %s (%s, %d parameters, %s) with %s on %d %s ranks%s, %s BLAS: %d train / %d test examples\n",
		p.Model, p.DType, p.Params, mib(p.ParamBytes), mode, p.Ranks, tr, why, o.blas, p.TrainExamples, p.TestExamples)
	fmt.Fprintf(w, "global batch %d (%d per rank), %d steps per epoch, %s, %d gradient bucket(s); all-reduce sends %s per rank per step\n",
		p.GlobalBatch, p.PerRankBatch, p.StepsPerEpoch, opt, p.Buckets, mib(p.CommBytesPerStep))
	if line := algorithmLine(p, o, conn); line != "" {
		fmt.Fprintln(w, line)
	}
	if p.Resumed {
		fmt.Fprintf(w, "resuming from %s at epoch %d, step %d (global step %d)\n",
			o.cfg.Resume, p.StartEpoch+1, p.StartStep, p.GlobalStep)
	}
}

func printSummary(w io.Writer, res *trainer.Result, o *options, elapsed time.Duration) {
	msg := "done"
	switch res.Stop {
	case trainer.StopMaxSteps:
		msg = fmt.Sprintf("stopped at -max-steps %d (epoch %d, step %d)", o.cfg.MaxSteps, res.Epoch+1, res.StepInEpoch)
	case trainer.StopDone:
		if len(res.Epochs) == 0 {
			msg = fmt.Sprintf("nothing to do: the checkpoint is already at epoch %d of -epochs %d", res.Epoch, o.cfg.Epochs)
		}
	}
	if n := len(res.Epochs); n > 0 {
		msg += fmt.Sprintf(": test accuracy %.2f%% after epoch %d", 100*res.Epochs[n-1].TestAccuracy, res.Epochs[n-1].Epoch)
	}
	msg += fmt.Sprintf(", %d steps in total, %.1fs", res.GlobalStep, elapsed.Seconds())
	fmt.Fprintln(w, msg)
	if res.Checkpoint != "" {
		fmt.Fprintf(w, "checkpoint: %s (job %s)\n", res.Checkpoint, o.jobID)
	}
	printWritten(w, o, len(res.Epochs) > 0)
}

// humanBytes renders n bytes with a binary unit.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// mergeTrace, in a tcp job's launcher with -trace, merges the rank files
// its ranks wrote (trace.RankFile, each on rank 0's clock) into the
// -trace file, whether the job failed (launchErr) or not: the timeline of
// a failed job shows where each rank stopped. Ranks of other hosts write
// on their hosts, so node 0's launcher merges what it finds and says what
// is missing; the other nodes' launchers leave their ranks' parts to it
// (on a shared filesystem they would race it).
func mergeTrace(o *options, launchErr error) error {
	if o.cfg.Trace == "" {
		return launchErr
	}
	if mp := o.tr.MP; mp.NodeRank != 0 {
		fmt.Fprintf(os.Stderr, "-trace: node %d's ranks wrote %s.rank<r>; node 0's launcher merges them into %s if it shares this filesystem\n",
			mp.NodeRank, o.cfg.Trace, o.cfg.Trace)
		return launchErr
	}
	err := trace.MergeRanks(o.cfg.Trace, o.tr.Ranks)
	switch {
	case err == nil:
	case launchErr != nil || o.tr.MP.Nnodes > 1 || o.survives(): // a rank lost takes its part with it
		fmt.Fprintf(os.Stderr, "-trace: %v\n", err)
	default:
		return fmt.Errorf("-trace: %w", err)
	}
	return launchErr
}
