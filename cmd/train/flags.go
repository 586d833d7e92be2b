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
	outGiven   bool // -out was given ("" then writes no files)
	json       bool
	quiet      bool
	cpuProfile string                  // -cpuprofile
	blas       string                  // the BLAS in use, for the report
	resumed    *trainer.CheckpointInfo // the -resume checkpoint's record
	exportData string                  // -export-data: write the bundled MNIST here instead of training

	maxRestarts   int           // -max-restarts: restarts of a failed tcp job (its launcher's)
	onFailure     string        // -on-failure: restart, or continue on the survivors (survive.go)
	zeroBuddies   bool          // ZeRO-1 ranks hold buddy copies (-zero-buddies, survive.go)
	heal          bool          // -heal: replace a lost rank, healed from the others (survive_heal.go)
	spares        int           // -spares: ranks started with the job that wait to replace a lost one
	minRanks      int           // -min-ranks: the fewest ranks a restart may run on
	rejoinTimeout time.Duration // -rejoin-timeout: how long node 0 waits for the other nodes after a failure
	lastCall      time.Duration // -last-call: node 0's wait for nodes MIN..MAX-1 of -nnodes MIN:MAX before the start
	resumeNotes   []string      // what -resume latest skipped, and what it chose

	jobID                string   // the job's id (job.go)
	jobIDMade            bool     // jobID is a new random id, not given
	checkpointFromResume bool     // -checkpoint defaulted to the -resume file's series
	notes                []string // what the run took from its -resume checkpoint, printed before training
	finished             string   // the -resume checkpoint is at -epochs already: this says so, and nothing runs
	algo, profile        string   // -algo and -profile as given ("": auto, the default model), for the plan
}

// flagValues holds the command line's flags as parsed, before validation:
// one field per flag, named after it.
type flagValues struct {
	ranks         int                   // -ranks
	model         string                // -model
	hidden        string                // -hidden
	dtype         string                // -dtype
	epochs        int                   // -epochs
	batch         int                   // -batch
	evalBatch     int                   // -eval-batch
	optName       string                // -optim
	lr            float64               // -lr
	momentum      float64               // -momentum
	weightDecay   float64               // -weight-decay
	bucketMB      float64               // -bucket-mb
	seed          int64                 // -seed
	data          string                // -data
	exportData    string                // -export-data
	checkpoint    string                // -checkpoint
	resume        string                // -resume
	jobID         string                // -job-id
	ckEvery       int64                 // -checkpoint-every
	ckKeep        int                   // -checkpoint-keep
	maxRestarts   int                   // -max-restarts
	onFailure     string                // -on-failure
	heal          bool                  // -heal
	spares        int                   // -spares
	minRanks      int                   // -min-ranks
	rejoinTimeout time.Duration         // -rejoin-timeout
	lastCall      time.Duration         // -last-call
	maxSteps      int64                 // -max-steps
	out           string                // -out
	traceOut      string                // -trace
	jsonOut       bool                  // -json
	quiet         bool                  // -quiet
	cpuProfile    string                // -cpuprofile
	algo          string                // -algo
	profile       string                // -profile
	zero1         bool                  // -zero1
	zeroBuddies   bool                  // -zero-buddies
	overlapOpt    bool                  // -overlap-optimizer
	uneven        int                   // -uneven-batches
	findUnused    bool                  // -find-unused-parameters
	compress      string                // -compress
	tf            launch.TransportFlags // -transport, -timeout and the multi-process flags
}

// defineFlags registers every flag of train on fs, with the defaults of
// def, and returns where their values land when fs parses.
func defineFlags(fs *flag.FlagSet, def trainer.Config) *flagValues {
	v := &flagValues{}
	fs.IntVar(&v.ranks, "ranks", def.Ranks, "number of data-parallel ranks (in-process goroutines with -transport inproc; processes on this host with -transport tcp, where under a launcher's RANK/WORLD_SIZE it must equal the world size or be left out)")
	fs.StringVar(&v.model, "model", def.Model, "model: mlp (784-256-128-10) or cnn (LeNet)")
	fs.StringVar(&v.hidden, "hidden", "256,128", "MLP hidden layer widths, comma-separated (-model mlp only)")
	fs.StringVar(&v.dtype, "dtype", def.DType, "element type: float32 or float64")
	fs.IntVar(&v.epochs, "epochs", def.Epochs, "epochs to train (a resumed run continues up to this many)")
	fs.IntVar(&v.batch, "batch", def.GlobalBatch, "global batch: examples per step over all ranks (at least -ranks; when -ranks does not divide it, the first batch mod ranks ranks take one example more and each rank's gradient is weighted by its share)")
	fs.IntVar(&v.evalBatch, "eval-batch", def.EvalBatch, "rows per evaluation batch on each rank")
	fs.StringVar(&v.optName, "optim", def.Optim, "optimizer: sgd, adam or adamw")
	fs.Float64Var(&v.lr, "lr", 0, "learning rate (default: sgd 0.1 for mlp and 0.05 for cnn; adam and adamw 1e-3)")
	fs.Float64Var(&v.momentum, "momentum", 0, "SGD momentum (default 0.9 for sgd)")
	fs.Float64Var(&v.weightDecay, "weight-decay", 0, "weight decay (default 0; 0.01 for adamw)")
	fs.Float64Var(&v.bucketMB, "bucket-mb", def.BucketMB, "gradient bucket size in MiB (the first bucket is 1 MiB, as in PyTorch)")
	fs.Int64Var(&v.seed, "seed", def.Seed, "seed of the model initialisation and the data order")
	fs.StringVar(&v.data, "data", "", "MNIST-style IDX directory (default: the bundled real MNIST, from the Go module cache)")
	fs.StringVar(&v.exportData, "export-data", "", "write the bundled MNIST (its four gzipped IDX files, as -data reads them) into this directory and exit, for hosts without the go command")
	fs.StringVar(&v.checkpoint, "checkpoint", "", "write a checkpoint (safetensors, mode 0600) here after every epoch and when stopping early (default with -resume: the resumed checkpoint's series); its directory is checked writable before training")
	fs.StringVar(&v.resume, "resume", "", "resume from this checkpoint and keep checkpointing into its series (unless -checkpoint says where); flags not given, -zero1 and the job id included, default to its values; \"latest\": the newest valid checkpoint of this job in -checkpoint's series, if there is one (else start afresh)")
	fs.StringVar(&v.jobID, "job-id", "", "this job's id, written into its checkpoints: -resume latest and elastic restarts take only this job's, and a fresh run refuses to overwrite a series holding any (default: $"+envJobID+", $TORCHELASTIC_RUN_ID or $SLURM_JOB_ID; resuming, the checkpoint's; else a new random id)")
	fs.Int64Var(&v.ckEvery, "checkpoint-every", 0, "also write the checkpoint every this many optimizer steps (0: after every epoch and when stopping early only)")
	fs.IntVar(&v.ckKeep, "checkpoint-keep", 0, "keep this many checkpoints under step-stamped names beside -checkpoint (ck.step120.safetensors), so that a torn one leaves an older one (default 2 with -checkpoint-every or -max-restarts, else 0)")
	fs.IntVar(&v.maxRestarts, "max-restarts", 0, "with -transport tcp: when a rank fails, stop the others and start the job again from the newest valid checkpoint, at most this many times (needs -checkpoint); with -nnodes, every node's launcher needs it, and node 0's launcher hosts their rendezvous at -master")
	fs.StringVar(&v.onFailure, "on-failure", launch.OnFailureRestart, onFailureUsage)
	fs.BoolVar(&v.heal, "heal", false, healUsage)
	fs.IntVar(&v.spares, "spares", 0, sparesUsage)
	fs.IntVar(&v.minRanks, "min-ranks", 0, "with -max-restarts: the fewest ranks (world size) a restart may run on when a rank cannot be restarted (fails at start-up) or, with -nnodes, a node does not come back (nodes are dropped whole); the global batch is kept (default: all of them, never fewer)")
	fs.DurationVar(&v.rejoinTimeout, "rejoin-timeout", launch.DefaultRejoinTimeout, "with -max-restarts and -nnodes: how long node 0's launcher waits for the other nodes' launchers to come back after a failure; a node that has not is dropped if -min-ranks allows")
	fs.DurationVar(&v.lastCall, "last-call", launch.DefaultLastCall, lastCallUsage)
	fs.Int64Var(&v.maxSteps, "max-steps", 0, "stop after this many optimizer steps in total (0: no limit)")
	fs.StringVar(&v.out, "out", "", "write metrics.csv, loss_accuracy.png (loss per step, smoothed; test loss and accuracy per epoch) and step_time.png (the step-time breakdown per epoch) into this directory, rewritten after every epoch (default: a new directory "+defaultRunsDir+"/<start time> per run; -out \"\": none)")
	fs.StringVar(&v.traceOut, "trace", "", "write the run's timeline here as a Chrome trace-event file (chrome://tracing, ui.perfetto.dev): a track per rank with forward, backward, each bucket's ready time and collective, the optimizer, evaluation and checkpoints; tcp ranks each write FILE.rank<r>, which the launcher merges into FILE with clocks aligned")
	fs.BoolVar(&v.jsonOut, "json", false, "print one JSON object per epoch instead of text")
	fs.BoolVar(&v.quiet, "quiet", false, "no progress output, only the per-epoch lines")
	fs.StringVar(&v.cpuProfile, "cpuprofile", "", "write a CPU profile of the training (pprof format) to this file")
	fs.StringVar(&v.algo, "algo", os.Getenv(allreduce.AlgorithmEnv), "all-reduce algorithm of the gradient buckets: "+allreduce.AlgorithmNames()+" (default auto, or $"+allreduce.AlgorithmEnv+"; auto: the cost model's fastest per size, see cmd/bench -explain)")
	fs.StringVar(&v.profile, "profile", os.Getenv(cost.ProfileEnv), "cost-model profile (JSON, as cmd/bench -calibrate writes it) that auto chooses by (default $"+cost.ProfileEnv+"; none: cost.DefaultModel)")
	fs.StringVar(&v.compress, "compress", "none", "gradient compression, a DDP communication hook: none, fp16, bf16 (16-bit with error feedback), powersgd[:rank[:start]] (PowerSGD, default rank 1 from step 10), auto (bf16 where the cost model says it pays); see docs/compression.md")
	fs.BoolVar(&v.zero1, "zero1", false, "ZeRO-1: shard the optimizer state over ranks (reduce-scatter gradients, update the local shard, all-gather parameters)")
	fs.BoolVar(&v.zeroBuddies, "zero-buddies", true, zeroBuddiesUsage)
	fs.IntVar(&v.uneven, "uneven-batches", 0, "test of uneven inputs: the last rank runs this many fewer steps per epoch and joins, shadowing the others' steps with zero gradients (PyTorch's Join, divide_by_initial_world_size=True; with -zero1 it keeps updating its shard, as PyTorch's ZeRO join hook); not with -zero-buddies or -checkpoint-every")
	fs.BoolVar(&v.overlapOpt, "overlap-optimizer", false, "update each gradient bucket as soon as its collective completes, overlapping the later buckets' communication (PyTorch's optimizer in backward); bitwise the same training")
	fs.BoolVar(&v.findUnused, "find-unused-parameters", false, "reduce the parameters a step computes no gradient for with a zero gradient instead of failing the step (PyTorch DDP's find_unused_parameters=True), for models whose steps leave parameters out; works with -compress, -overlap-optimizer, -zero1 and -uneven-batches; the built-in models use every parameter")
	v.tf.Register(fs)
	v.tf.RegisterJoinTimeout(fs)
	return v
}

// parseFlags parses args. It returns nil, nil after printing the usage for
// -h or -help.
//
// The steps: define the flags and parse them; take what -resume's
// checkpoint fixes (resolveResume); resolve the transport and the restart
// flags, under a launcher's environment (resolveLaunch); default the
// optimizer's settings (defaultOptimizer); validate; build the trainer's
// configuration (buildConfig).
func parseFlags(args []string, stdout io.Writer) (*options, error) {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	v := defineFlags(fs, trainer.DefaultConfig())
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
		return exportOptions(v.exportData, given)
	}
	set := map[string]bool{} // given, or taken from the -resume checkpoint
	for k := range given {
		set[k] = true
	}

	o := &options{out: v.out, outGiven: given["out"], json: v.jsonOut, quiet: v.quiet, cpuProfile: v.cpuProfile}
	if err := v.tf.CheckName(); err != nil {
		return nil, err
	}
	if err := o.resolveResume(v, set); err != nil {
		return nil, err
	}
	if err := o.resolveLaunch(v, given); err != nil {
		return nil, err
	}
	if err := v.defaultOptimizer(set); err != nil {
		return nil, err
	}
	if err := o.validate(v, given); err != nil {
		return nil, err
	}
	if err := o.buildConfig(v); err != nil {
		return nil, err
	}
	if err := o.prepareCheckpoints(given, os.Getenv); err != nil {
		return nil, err
	}
	return o, nil
}

// resolveResume resolves -resume latest to a checkpoint of -checkpoint's
// series, and with -resume, defaults the flags that the checkpoint fixes
// (and that set does not hold yet) to its values, adding them to set.
func (o *options) resolveResume(v *flagValues, set map[string]bool) error {
	var err error
	if o.jobID, err = explicitJob(v.jobID, os.Getenv); err != nil {
		return err
	}
	if v.resume == resumeLatest {
		if v.checkpoint == "" {
			return errors.New("-resume latest needs -checkpoint: it resumes from the newest valid checkpoint written there")
		}
		if v.resume, o.resumeNotes, err = latestCheckpoint(v.checkpoint, o.jobID); err != nil {
			return err
		}
	}
	if v.resume == "" {
		return nil
	}
	info, err := trainer.ReadCheckpointInfo(v.resume)
	if err != nil {
		return fmt.Errorf("-resume: %w", err)
	}
	o.resumed = &info
	if o.jobID == "" {
		o.jobID = info.JobID // adopted: the run continues the checkpoint's job
	}
	if v.checkpoint == "" {
		v.checkpoint, o.checkpointFromResume = seriesPath(v.resume), true
	}
	fill := func(name string, apply func()) {
		if !set[name] {
			apply()
			set[name] = true
		}
	}
	fill("ranks", func() { v.ranks = info.Ranks })
	fill("model", func() { v.model = info.Model })
	if info.Model == trainer.ModelMLP {
		fill("hidden", func() { v.hidden = joinInts(info.Hidden) })
	}
	fill("dtype", func() { v.dtype = info.DType })
	fill("batch", func() { v.batch = info.GlobalBatch })
	fill("seed", func() { v.seed = info.Seed })
	fill("zero1", func() { v.zero1 = info.Zero1 })
	fill("optim", func() { v.optName = info.Optim })
	if v.optName == info.Optim {
		fill("lr", func() { v.lr = info.LR })
		fill("momentum", func() { v.momentum = info.Momentum })
		fill("weight-decay", func() { v.weightDecay = info.WeightDecay })
	}
	return nil
}

// resolveLaunch resolves -transport and the multi-process flags: with
// -transport tcp, this process is a rank of a launched job (whose world
// size -ranks becomes, from a launcher's environment) or its launcher. It
// then resolves the restart flags (-max-restarts, -min-ranks,
// -rejoin-timeout) and -checkpoint-keep's default, which depends on them.
func (o *options) resolveLaunch(v *flagValues, given map[string]bool) error {
	var err error
	if o.tr, err = v.tf.Resolve(v.ranks, given, os.Getenv); err != nil {
		return err
	}
	v.ranks = o.tr.Ranks
	if !given["checkpoint-keep"] && (v.ckEvery > 0 || v.maxRestarts > 0) {
		v.ckKeep = defaultKeep
	}
	if o.zeroBuddies, err = zeroBuddiesFlag(v, given); err != nil {
		return err
	}
	if o.onFailure, err = onFailureFlag(o.tr, v.onFailure, v.zero1 && !o.zeroBuddies, given); err != nil {
		return err
	}
	if o.heal, o.spares, err = healFlags(o.tr, o.onFailure, v.zero1 && !o.zeroBuddies && v.onFailure == launch.OnFailureContinue, v.heal, v.spares, given); err != nil {
		return err
	}
	if err := scaleUpFlags(o.tr, o.onFailure, o.heal, v.zero1, o.spares); err != nil {
		return err
	}
	if o.lastCall, err = lastCallFlag(o.tr, v.lastCall, given["last-call"]); err != nil {
		return err
	}
	if o.maxRestarts, o.minRanks, err = elasticFlags(o.tr, v.maxRestarts, v.minRanks, given, v.checkpoint, os.Getenv, o.survives()); err != nil {
		return err
	}
	switch {
	case given["rejoin-timeout"] && (o.maxRestarts == 0 || o.tr.MP == nil || (o.tr.Launcher() && o.tr.MP.MostNodes() < 2)):
		return errors.New("-rejoin-timeout applies with -max-restarts and -nnodes > 1 only")
	case v.rejoinTimeout <= 0:
		return fmt.Errorf("-rejoin-timeout %v: must be positive", v.rejoinTimeout)
	}
	o.rejoinTimeout = v.rejoinTimeout
	return nil
}

// defaultOptimizer checks -optim and defaults the settings of the
// optimizer (-lr, -momentum, -weight-decay) that set does not hold.
func (v *flagValues) defaultOptimizer(set map[string]bool) error {
	switch v.optName {
	case trainer.OptimSGD, trainer.OptimAdam, trainer.OptimAdamW:
	default:
		return fmt.Errorf("-optim %q: unknown optimizer (valid: sgd, adam, adamw)", v.optName)
	}
	if !set["lr"] {
		v.lr = trainer.DefaultLR(v.optName, v.model)
	}
	if !set["momentum"] {
		v.momentum = trainer.DefaultMomentum(v.optName)
	}
	if !set["weight-decay"] {
		v.weightDecay = trainer.DefaultWeightDecay(v.optName)
	}
	return nil
}

// validate checks the flags' values against each other, and for a
// launcher, that the global batch divides over every world size a restart
// may shrink to.
func (o *options) validate(v *flagValues, given map[string]bool) error {
	switch {
	case v.ranks < 1:
		return fmt.Errorf("-ranks %d: need at least 1", v.ranks)
	case v.model != trainer.ModelMLP && v.model != trainer.ModelCNN:
		return fmt.Errorf("-model %q: unknown model (valid: mlp, cnn)", v.model)
	case v.dtype != trainer.Float32 && v.dtype != trainer.Float64:
		return fmt.Errorf("-dtype %q: unknown element type (valid: float32, float64)", v.dtype)
	case v.epochs < 1:
		return fmt.Errorf("-epochs %d: need at least 1", v.epochs)
	case v.batch < 1:
		return fmt.Errorf("-batch %d: need at least 1", v.batch)
	case v.batch < v.ranks:
		return fmt.Errorf("-batch %d is smaller than -ranks %d: a rank would have no example", v.batch, v.ranks)
	case v.evalBatch < 1:
		return fmt.Errorf("-eval-batch %d: need at least 1", v.evalBatch)
	case !(v.lr > 0) || math.IsInf(v.lr, 0):
		return fmt.Errorf("-lr %v: must be positive and finite", v.lr)
	case !(v.momentum >= 0) || math.IsInf(v.momentum, 0):
		return fmt.Errorf("-momentum %v: must be non-negative and finite", v.momentum)
	case v.momentum != 0 && v.optName != trainer.OptimSGD:
		return fmt.Errorf("-momentum %v: only -optim sgd has momentum (got -optim %s)", v.momentum, v.optName)
	case !(v.weightDecay >= 0) || math.IsInf(v.weightDecay, 0):
		return fmt.Errorf("-weight-decay %v: must be non-negative and finite", v.weightDecay)
	case !(v.bucketMB > 0) || math.IsInf(v.bucketMB, 0) || v.bucketMB > 1<<20:
		return fmt.Errorf("-bucket-mb %v: must be positive (MiB)", v.bucketMB)
	case v.maxSteps < 0:
		return fmt.Errorf("-max-steps %d: must not be negative", v.maxSteps)
	case v.ckEvery < 0:
		return fmt.Errorf("-checkpoint-every %d: must not be negative", v.ckEvery)
	case v.ckKeep < 0:
		return fmt.Errorf("-checkpoint-keep %d: must not be negative", v.ckKeep)
	case (v.ckEvery > 0 || v.ckKeep > 0) && v.checkpoint == "":
		return errors.New("-checkpoint-every and -checkpoint-keep need -checkpoint: the file they write")
	case given["hidden"] && v.model != trainer.ModelMLP:
		return fmt.Errorf("-hidden applies to -model mlp only")
	}
	if o.tr.Launcher() { // the ranks of a restart may be fewer already
		if err := checkShrink(v.batch, o.minRanks, v.ranks, perNode(o.tr)); err != nil {
			return err
		}
	}
	return nil
}

// buildConfig builds o.cfg, the trainer's configuration, from the
// validated flags, and validates it.
func (o *options) buildConfig(v *flagValues) error {
	var widths []int
	if v.model == trainer.ModelMLP {
		var err error
		if widths, err = parseInts(v.hidden); err != nil {
			return fmt.Errorf("-hidden %q: %v", v.hidden, err)
		}
	}
	o.algo, o.profile = v.algo, v.profile
	groupOpts, err := groupOptions(v.algo, v.profile)
	if err != nil {
		return err
	}
	o.cfg = trainer.Config{
		Ranks: v.ranks, Model: v.model, Hidden: widths, DType: v.dtype,
		Epochs: v.epochs, GlobalBatch: v.batch, EvalBatch: v.evalBatch,
		Optim: v.optName, LR: v.lr, Momentum: v.momentum, WeightDecay: v.weightDecay,
		BucketMB: v.bucketMB, Zero1: v.zero1, Seed: v.seed, DataDir: v.data,
		Checkpoint: v.checkpoint, CheckpointEvery: v.ckEvery, CheckpointKeep: v.ckKeep,
		Resume: v.resume, MaxSteps: v.maxSteps, Trace: v.traceOut,
		Connect: o.connect, GroupOptions: groupOpts, Compress: v.compress,
	}
	if o.cfg.CompressModel, err = compressModel(v.compress, v.profile); err != nil {
		return err
	}
	o.cfg.OverlapOptimizer, o.cfg.UnevenBatches = v.overlapOpt, v.uneven
	o.cfg.FindUnusedParameters = v.findUnused
	o.cfg.ZeroBuddies = o.zeroBuddies
	if mp := o.tr.MP; mp != nil && mp.MostNodes() >= 2 {
		o.cfg.BuddyNodes.Nodes, o.cfg.BuddyNodes.Ranks, o.cfg.BuddyNodes.Node = mp.MostNodes(), mp.LocalRanks, mp.NodeRank
	}
	return o.cfg.Validate()
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
	if tr.MP == nil || tr.MP.MostNodes() < 2 {
		return 1
	}
	return tr.MP.LocalRanks
}
