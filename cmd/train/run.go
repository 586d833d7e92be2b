package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/ringddp/ringddp/internal/blas"
	"github.com/ringddp/ringddp/internal/trainer"
)

// run parses args, trains, and writes the report to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return runWith(ctx, args, stdout, thisProgram)
}

// runWith is run with ranks as the command of a -transport tcp job's ranks.
func runWith(ctx context.Context, args []string, stdout io.Writer, ranks rankCommand) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	if o == nil { // -h
		return nil
	}
	if o.mp != nil && o.mp.Launcher { // -transport tcp, not under a launcher: be one
		return launchRanks(ctx, o, args, stdout, ranks)
	}
	o.blas = blas.Setup()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("-out: %w", err)
		}
	}
	prog := chooseProgress(stdout, o.json, o.quiet)
	text := !o.json
	var all []trainer.EpochMetrics
	var outErr error
	start := time.Now()
	cfg := o.cfg
	cfg.OnStart = func(p trainer.Plan) {
		if text && !o.quiet {
			printPlan(stdout, p, o)
		}
		prog.plan(p)
	}
	cfg.OnStep = prog.step
	cfg.OnEpoch = func(m trainer.EpochMetrics) {
		prog.done()
		all = append(all, m)
		if o.json {
			b, err := json.Marshal(m)
			if err != nil && outErr == nil {
				outErr = err
			}
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			printEpoch(stdout, m, cfg.Epochs)
		}
		if o.out != "" && outErr == nil {
			outErr = writeOutputs(o.out, all)
		}
	}
	res, err := trainer.Run(ctx, cfg)
	prog.done()
	if err != nil {
		if res != nil && res.Checkpoint != "" {
			return fmt.Errorf("%w (checkpoint written to %s; resume with -resume %s)", err, res.Checkpoint, res.Checkpoint)
		}
		return err
	}
	if outErr != nil {
		return fmt.Errorf("-out: %w", outErr)
	}
	if text && o.reports() {
		printSummary(stdout, res, o, time.Since(start))
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

func printPlan(w io.Writer, p trainer.Plan, o *options) {
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
	fmt.Fprintf(w, "training %s (%s, %d parameters, %s) with %s on %d %s ranks, %s BLAS: %d train / %d test examples\n",
		p.Model, p.DType, p.Params, mib(p.ParamBytes), mode, p.Ranks, o.transport, o.blas, p.TrainExamples, p.TestExamples)
	fmt.Fprintf(w, "global batch %d (%d per rank), %d steps per epoch, %s, %d gradient bucket(s); all-reduce sends %s per rank per step\n",
		p.GlobalBatch, p.PerRankBatch, p.StepsPerEpoch, opt, p.Buckets, mib(p.CommBytesPerStep))
	if p.Resumed {
		fmt.Fprintf(w, "resuming from %s at epoch %d, step %d (global step %d)\n",
			o.cfg.Resume, p.StartEpoch+1, p.StartStep, p.GlobalStep)
	}
}

func printEpoch(w io.Writer, m trainer.EpochMetrics, epochs int) {
	fmt.Fprintf(w, "epoch %d/%d  train_loss %.4f  test_acc %.2f%%  test_loss %.4f  %.0f samples/s  %.1fs (eval %.1fs)  step time: compute %.1fs, comm wait %.2fs (%.1f%%), optimizer %.2fs  opt state %s/rank, %s sent/step\n",
		m.Epoch, epochs, m.TrainLoss, 100*m.TestAccuracy, m.TestLoss, m.SamplesPerSec, m.EpochSeconds, m.EvalSeconds,
		m.ComputeSeconds, m.CommWaitSeconds, 100*m.CommWaitFraction(), m.OptimizerSeconds,
		humanBytes(m.OptStateBytesPerRank), humanBytes(m.CommBytesPerStep))
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
		fmt.Fprintf(w, "checkpoint: %s\n", res.Checkpoint)
	}
	if o.out != "" {
		fmt.Fprintf(w, "metrics: %s, plot: %s\n", filepath.Join(o.out, metricsFile), filepath.Join(o.out, plotFile))
	}
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
