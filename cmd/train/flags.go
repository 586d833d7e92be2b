package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// options is a parsed and validated command line.
type options struct {
	cfg        trainer.Config
	tr         *launch.Transport // -transport and the multi-process flags, resolved
	out        string
	json       bool
	quiet      bool
	cpuProfile string                  // -cpuprofile
	blas       string                  // the BLAS in use, for the report
	resumed    *trainer.CheckpointInfo // the -resume checkpoint's record
	exportData string                  // -export-data: write the bundled MNIST here instead of training

	maxRestarts   int           // -max-restarts: restarts of a failed tcp job (its launcher's)
	minRanks      int           // -min-ranks: the fewest ranks a restart may run on
	rejoinTimeout time.Duration // -rejoin-timeout: how long node 0 waits for the other nodes after a failure
	resumeNotes   []string      // what -resume latest skipped, and what it chose
}

// parseFlags parses args. It returns nil, nil after printing the usage for
// -h or -help.
func parseFlags(args []string, stdout io.Writer) (*options, error) {
	def := trainer.DefaultConfig()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	var (
		ranks         = fs.Int("ranks", def.Ranks, "number of data-parallel ranks (in-process goroutines with -transport inproc; processes on this host with -transport tcp, where under a launcher's RANK/WORLD_SIZE it must equal the world size or be left out)")
		model         = fs.String("model", def.Model, "model: mlp (784-256-128-10) or cnn (LeNet)")
		hidden        = fs.String("hidden", "256,128", "MLP hidden layer widths, comma-separated (-model mlp only)")
		dtype         = fs.String("dtype", def.DType, "element type: float32 or float64")
		epochs        = fs.Int("epochs", def.Epochs, "epochs to train (a resumed run continues up to this many)")
		batch         = fs.Int("batch", def.GlobalBatch, "global batch: examples per step over all ranks (divisible by -ranks)")
		evalBatch     = fs.Int("eval-batch", def.EvalBatch, "rows per evaluation batch on each rank")
		optName       = fs.String("optim", def.Optim, "optimizer: sgd, adam or adamw")
		lr            = fs.Float64("lr", 0, "learning rate (default: sgd 0.1 for mlp and 0.05 for cnn; adam and adamw 1e-3)")
		momentum      = fs.Float64("momentum", 0, "SGD momentum (default 0.9 for sgd)")
		weightDecay   = fs.Float64("weight-decay", 0, "weight decay (default 0; 0.01 for adamw)")
		bucketMB      = fs.Float64("bucket-mb", def.BucketMB, "gradient bucket size in MiB (the first bucket is 1 MiB, as in PyTorch)")
		seed          = fs.Int64("seed", def.Seed, "seed of the model initialisation and the data order")
		data          = fs.String("data", "", "MNIST-style IDX directory (default: the bundled real MNIST, from the Go module cache)")
		exportData    = fs.String("export-data", "", "write the bundled MNIST (its four gzipped IDX files, as -data reads them) into this directory and exit, for hosts without the go command")
		checkpoint    = fs.String("checkpoint", "", "write a checkpoint (safetensors) here after every epoch and when stopping early")
		resume        = fs.String("resume", "", "resume from this checkpoint; flags not given default to its values; \"latest\": the newest valid checkpoint of -checkpoint's series, if there is one (else start afresh)")
		ckEvery       = fs.Int64("checkpoint-every", 0, "also write the checkpoint every this many optimizer steps (0: after every epoch and when stopping early only)")
		ckKeep        = fs.Int("checkpoint-keep", 0, "keep this many checkpoints under step-stamped names beside -checkpoint (ck.step120.safetensors), so that a torn one leaves an older one (default 2 with -checkpoint-every or -max-restarts, else 0)")
		maxRestarts   = fs.Int("max-restarts", 0, "with -transport tcp: when a rank fails, stop the others and start the job again from the newest valid checkpoint, at most this many times (needs -checkpoint); with -nnodes, every node's launcher needs it, and node 0's launcher hosts their rendezvous at -master")
		minRanks      = fs.Int("min-ranks", 0, "with -max-restarts: the fewest ranks (world size) a restart may run on when a rank cannot be restarted (fails at start-up) or, with -nnodes, a node does not come back (nodes are dropped whole); the global batch is kept (default: all of them, never fewer)")
		rejoinTimeout = fs.Duration("rejoin-timeout", launch.DefaultRejoinTimeout, "with -max-restarts and -nnodes: how long node 0's launcher waits for the other nodes' launchers to come back after a failure; a node that has not is dropped if -min-ranks allows")
		maxSteps      = fs.Int64("max-steps", 0, "stop after this many optimizer steps in total (0: no limit)")
		out           = fs.String("out", "", "write metrics.csv, loss_accuracy.png (loss per step, smoothed; test loss and accuracy per epoch) and step_time.png (the step-time breakdown per epoch) into this directory")
		traceOut      = fs.String("trace", "", "write the run's timeline here as a Chrome trace-event file (chrome://tracing, ui.perfetto.dev): a track per rank with forward, backward, each bucket's ready time and collective, the optimizer, evaluation and checkpoints; tcp ranks each write FILE.rank<r>, which the launcher merges into FILE with clocks aligned")
		jsonOut       = fs.Bool("json", false, "print one JSON object per epoch instead of text")
		quiet         = fs.Bool("quiet", false, "no progress output, only the per-epoch lines")
		cpuProfile    = fs.String("cpuprofile", "", "write a CPU profile of the training (pprof format) to this file")
		algo          = fs.String("algo", os.Getenv(allreduce.AlgorithmEnv), "all-reduce algorithm of the gradient buckets: "+allreduce.AlgorithmNames()+" (default auto, or $"+allreduce.AlgorithmEnv+"; auto: the cost model's fastest per size, see cmd/bench -explain)")
		profile       = fs.String("profile", os.Getenv(cost.ProfileEnv), "cost-model profile (JSON, as cmd/bench -calibrate writes it) that auto chooses by (default $"+cost.ProfileEnv+"; none: cost.DefaultModel)")
		zero1         = fs.Bool("zero1", false, "ZeRO-1: shard the optimizer state over ranks (reduce-scatter gradients, update the local shard, all-gather parameters)")
		tf            launch.TransportFlags // -transport, -timeout and the multi-process flags
	)
	tf.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: train [flags]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, fmt.Errorf("%v (see -h)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: train takes flags only (see -h)", fs.Arg(0))
	}
	given := map[string]bool{} // flags on the command line
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["export-data"] {
		return exportOptions(*exportData, given)
	}
	set := map[string]bool{} // given, or taken from the -resume checkpoint
	for k := range given {
		set[k] = true
	}

	o := &options{out: *out, json: *jsonOut, quiet: *quiet, cpuProfile: *cpuProfile}
	var err error
	if err = tf.CheckName(); err != nil {
		return nil, err
	}

	if *resume == resumeLatest {
		if *checkpoint == "" {
			return nil, errors.New("-resume latest needs -checkpoint: it resumes from the newest valid checkpoint written there")
		}
		if *resume, o.resumeNotes, err = latestCheckpoint(*checkpoint); err != nil {
			return nil, err
		}
	}
	// With -resume, what the checkpoint fixes defaults to its values.
	if *resume != "" {
		info, err := trainer.ReadCheckpointInfo(*resume)
		if err != nil {
			return nil, fmt.Errorf("-resume: %w", err)
		}
		o.resumed = &info
		fill := func(name string, apply func()) {
			if !set[name] {
				apply()
				set[name] = true
			}
		}
		fill("ranks", func() { *ranks = info.Ranks })
		fill("model", func() { *model = info.Model })
		if info.Model == trainer.ModelMLP {
			fill("hidden", func() { *hidden = joinInts(info.Hidden) })
		}
		fill("dtype", func() { *dtype = info.DType })
		fill("batch", func() { *batch = info.GlobalBatch })
		fill("seed", func() { *seed = info.Seed })
		fill("optim", func() { *optName = info.Optim })
		if *optName == info.Optim {
			fill("lr", func() { *lr = info.LR })
			fill("momentum", func() { *momentum = info.Momentum })
			fill("weight-decay", func() { *weightDecay = info.WeightDecay })
		}
	}

	// -transport tcp: this process is a rank of a launched job (whose world
	// size -ranks becomes) or its launcher.
	if o.tr, err = tf.Resolve(*ranks, given, os.Getenv); err != nil {
		return nil, err
	}
	*ranks = o.tr.Ranks
	if !given["checkpoint-keep"] && (*ckEvery > 0 || *maxRestarts > 0) {
		*ckKeep = defaultKeep
	}
	if o.maxRestarts, o.minRanks, err = elasticFlags(o.tr, *maxRestarts, *minRanks, given, *checkpoint, os.Getenv); err != nil {
		return nil, err
	}
	switch {
	case given["rejoin-timeout"] && (o.maxRestarts == 0 || o.tr.MP == nil || (o.tr.Launcher() && o.tr.MP.Nnodes < 2)):
		return nil, errors.New("-rejoin-timeout applies with -max-restarts and -nnodes > 1 only")
	case *rejoinTimeout <= 0:
		return nil, fmt.Errorf("-rejoin-timeout %v: must be positive", *rejoinTimeout)
	}
	o.rejoinTimeout = *rejoinTimeout

	switch *optName {
	case trainer.OptimSGD, trainer.OptimAdam, trainer.OptimAdamW:
	default:
		return nil, fmt.Errorf("-optim %q: unknown optimizer (valid: sgd, adam, adamw)", *optName)
	}
	if !set["lr"] {
		*lr = trainer.DefaultLR(*optName, *model)
	}
	if !set["momentum"] {
		*momentum = trainer.DefaultMomentum(*optName)
	}
	if !set["weight-decay"] {
		*weightDecay = trainer.DefaultWeightDecay(*optName)
	}

	switch {
	case *ranks < 1:
		return nil, fmt.Errorf("-ranks %d: need at least 1", *ranks)
	case *model != trainer.ModelMLP && *model != trainer.ModelCNN:
		return nil, fmt.Errorf("-model %q: unknown model (valid: mlp, cnn)", *model)
	case *dtype != trainer.Float32 && *dtype != trainer.Float64:
		return nil, fmt.Errorf("-dtype %q: unknown element type (valid: float32, float64)", *dtype)
	case *epochs < 1:
		return nil, fmt.Errorf("-epochs %d: need at least 1", *epochs)
	case *batch < 1:
		return nil, fmt.Errorf("-batch %d: need at least 1", *batch)
	case *batch%*ranks != 0:
		return nil, fmt.Errorf("-batch %d is not divisible by -ranks %d: each rank takes batch/ranks examples per step", *batch, *ranks)
	case *evalBatch < 1:
		return nil, fmt.Errorf("-eval-batch %d: need at least 1", *evalBatch)
	case !(*lr > 0) || math.IsInf(*lr, 0):
		return nil, fmt.Errorf("-lr %v: must be positive and finite", *lr)
	case !(*momentum >= 0) || math.IsInf(*momentum, 0):
		return nil, fmt.Errorf("-momentum %v: must be non-negative and finite", *momentum)
	case *momentum != 0 && *optName != trainer.OptimSGD:
		return nil, fmt.Errorf("-momentum %v: only -optim sgd has momentum (got -optim %s)", *momentum, *optName)
	case !(*weightDecay >= 0) || math.IsInf(*weightDecay, 0):
		return nil, fmt.Errorf("-weight-decay %v: must be non-negative and finite", *weightDecay)
	case !(*bucketMB > 0) || math.IsInf(*bucketMB, 0) || *bucketMB > 1<<20:
		return nil, fmt.Errorf("-bucket-mb %v: must be positive (MiB)", *bucketMB)
	case *maxSteps < 0:
		return nil, fmt.Errorf("-max-steps %d: must not be negative", *maxSteps)
	case *ckEvery < 0:
		return nil, fmt.Errorf("-checkpoint-every %d: must not be negative", *ckEvery)
	case *ckKeep < 0:
		return nil, fmt.Errorf("-checkpoint-keep %d: must not be negative", *ckKeep)
	case (*ckEvery > 0 || *ckKeep > 0) && *checkpoint == "":
		return nil, errors.New("-checkpoint-every and -checkpoint-keep need -checkpoint: the file they write")
	case given["hidden"] && *model != trainer.ModelMLP:
		return nil, fmt.Errorf("-hidden applies to -model mlp only")
	}
	if o.tr.Launcher() { // the ranks of a restart may be fewer already
		if err := checkShrink(*batch, o.minRanks, *ranks, perNode(o.tr)); err != nil {
			return nil, err
		}
	}
	var widths []int
	if *model == trainer.ModelMLP {
		var err error
		if widths, err = parseInts(*hidden); err != nil {
			return nil, fmt.Errorf("-hidden %q: %v", *hidden, err)
		}
	}

	groupOpts, err := groupOptions(*algo, *profile)
	if err != nil {
		return nil, err
	}
	o.cfg = trainer.Config{
		Ranks: *ranks, Model: *model, Hidden: widths, DType: *dtype,
		Epochs: *epochs, GlobalBatch: *batch, EvalBatch: *evalBatch,
		Optim: *optName, LR: *lr, Momentum: *momentum, WeightDecay: *weightDecay,
		BucketMB: *bucketMB, Zero1: *zero1, Seed: *seed, DataDir: *data,
		Checkpoint: *checkpoint, CheckpointEvery: *ckEvery, CheckpointKeep: *ckKeep,
		Resume: *resume, MaxSteps: *maxSteps, Trace: *traceOut,
		Connect: o.connect, GroupOptions: groupOpts,
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// connect is trainer.Config.Connect: this process's endpoints over -transport.
func (o *options) connect(ctx context.Context, ranks int) ([]transport.Conn, error) {
	conns, err := o.tr.Connect(ctx, ranks)
	if err != nil {
		return nil, fmt.Errorf("-transport %s: %w", o.tr.Name, err)
	}
	return conns, nil
}

// exportOptions are the options of -export-data DIR, which takes no other
// flag.
func exportOptions(dir string, given map[string]bool) (*options, error) {
	var others []string
	for name := range given {
		if name != "export-data" {
			others = append(others, "-"+name)
		}
	}
	sort.Strings(others)
	switch {
	case dir == "":
		return nil, errors.New("-export-data: needs a directory")
	case len(others) > 0:
		return nil, fmt.Errorf("-export-data writes the data and exits: it takes no other flags (got %s)", strings.Join(others, ", "))
	}
	return &options{exportData: dir}, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers separated by commas, like 256,128")
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// groupOptions are the communicator options -algo and -profile ask for.
func groupOptions(algo, profile string) ([]allreduce.GroupOption, error) {
	var opts []allreduce.GroupOption
	if algo != "" {
		a, err := allreduce.ParseAlgorithm(algo)
		if err != nil {
			return nil, fmt.Errorf("-algo: %w", err)
		}
		opts = append(opts, allreduce.WithAlgorithm(a))
	}
	if profile != "" {
		p, err := cost.ReadProfile(profile, allreduce.KnownMeasurement)
		if err != nil {
			return nil, fmt.Errorf("-profile: %w", err)
		}
		opts = append(opts, allreduce.WithModel(p.Model))
	}
	return opts, nil
}

// gemmThreads is how many goroutines one matrix product may use: this
// process's cores (GOMAXPROCS, already its share when it is one of several
// tcp ranks on the host) over the ranks it runs, at least one.
func gemmThreads(tr *launch.Transport) int {
	ranksHere := 1
	if tr.MP == nil {
		ranksHere = tr.Ranks
	}
	return max(1, runtime.GOMAXPROCS(0)/max(1, ranksHere))
}

// perNode is the unit a multi-host job's world grows and shrinks by: the
// ranks per node; 1 on one host.
func perNode(tr *launch.Transport) int {
	if tr.MP == nil || tr.MP.Nnodes < 2 {
		return 1
	}
	return tr.MP.LocalRanks
}
