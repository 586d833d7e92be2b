package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/bytesize"
	"github.com/ringddp/ringddp/internal/outfile"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// collective describes one -op value.
type collective struct {
	name string
	kind allreduce.Kind
	// reduces: the op takes -redop.
	reduces bool
	// rooted: the op takes -root.
	rooted bool
	// gathered: the bytes column is the total (gathered) size and the count
	// is rounded down to a multiple of the number of ranks (nccl-tests'
	// convention for all-gather and reduce-scatter).
	gathered bool
	// busFactor converts algorithm bandwidth to bus bandwidth on n ranks
	// (nccl-tests' PERFORMANCE.md).
	busFactor func(n int) float64
}

var collectives = map[string]collective{
	"allreduce": {name: "allreduce", kind: allreduce.KindAllReduce, reduces: true, busFactor: func(n int) float64 {
		return 2 * float64(n-1) / float64(n)
	}},
	"reducescatter": {name: "reducescatter", kind: allreduce.KindReduceScatter, reduces: true, gathered: true, busFactor: func(n int) float64 {
		return float64(n-1) / float64(n)
	}},
	"allgather": {name: "allgather", kind: allreduce.KindAllGather, gathered: true, busFactor: func(n int) float64 {
		return float64(n-1) / float64(n)
	}},
	"broadcast": {name: "broadcast", kind: allreduce.KindBroadcast, rooted: true, busFactor: func(int) float64 { return 1 }},
	"reduce":    {name: "reduce", kind: allreduce.KindReduce, reduces: true, rooted: true, busFactor: func(int) float64 { return 1 }},
}

var redops = map[string]allreduce.ReduceOp{
	"sum": allreduce.Sum, "avg": allreduce.Avg, "max": allreduce.Max, "min": allreduce.Min, "prod": allreduce.Prod,
}

var dtypes = map[string]allreduce.DType{
	"float32": allreduce.Float32, "float64": allreduce.Float64, "int32": allreduce.Int32, "int64": allreduce.Int64,
	"float16": allreduce.Float16, "bfloat16": allreduce.BFloat16,
}

// config is a parsed and validated command line.
type config struct {
	rankCmd    launch.RankCommand // what a -transport tcp run's ranks execute
	op         collective
	transport  string
	ranks      int
	algo       string                     // -algo as given ("auto" when empty)
	algos      []allreduce.Algorithm      // the all-reduce algorithms to run, one sweep each, in order
	schedules  []allreduce.RootedSchedule // -schedule: broadcast's and reduce's schedules to run, one sweep each (auto alone for the others)
	localSize  int                        // -local-size, or derived from -nodes: in-process or simulated ranks on nodes of this many (0: no topology)
	nodes      int                        // -nodes (0: not given)
	payload    string                     // -sim-payload: auto, real or none
	simOverlap bool                       // -sim-overlap: two endpoints per simulated rank (sim.Config.Overlap)
	model      *cost.Model                // the cost model (profile, flags, sim defaults); nil: none given for a real transport
	modelFrom  string                     // where model came from, for the reports
	explain    bool                       // -explain: print the cost model's predictions and picks, run nothing
	compare    string                     // -compare: earlier runs' -json rows to check against the model (files or globs, comma-separated); run nothing
	algoGiven  bool                       // -algo was on the command line
	plot       string                     // -plot: the PNG to draw
	timeline   *timeline                  // -trace: the collectives' timeline (nil: none)
	calibrate  string                     // -calibrate: the profile to write
	calibMax   int                        // -calib-max: the ring exchange's largest message
	calibCores int                        // -calibrate: the model's Cores (-cores, else this host's CPUs)
	dtype      allreduce.DType
	redop      allreduce.ReduceOp
	redopName  string
	minBytes   int
	maxBytes   int
	factor     int
	iters      int
	warmup     int
	backToBack bool // -back-to-back: no barrier between a size's iterations
	check      bool
	json       bool
	root       int
	tr         *launch.Transport // -transport, -timeout and the multi-process flags, resolved
	mp         *launch.Setup     // tr.MP: -transport tcp: launcher or rank (nil otherwise)
	cpuprof    string            // -cpuprofile
	args       []string          // the command line, for the launcher's ranks
}

// names lists a map's keys, sorted, for error messages.
func names[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// parseConfig parses args. It returns nil, nil after printing the usage for
// -h or -help.
func parseConfig(args []string, stdout io.Writer) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	var (
		op      = fs.String("op", "allreduce", "collective: "+names(collectives))
		ranks   = fs.Int("ranks", 4, "number of ranks (processes on this host with -transport tcp, where under a launcher's RANK/WORLD_SIZE it must equal the world size or be left out)")
		algo    = fs.String("algo", os.Getenv(allreduce.AlgorithmEnv), "all-reduce algorithm: "+allreduce.AlgorithmNames()+", a comma-separated list of them (one sweep each), or all (auto and every algorithm that can run on the transport); default auto, or $"+allreduce.AlgorithmEnv+". auto: the cost model's fastest per size (see -explain). The other collectives have one algorithm each")
		sched   = fs.String("schedule", allreduce.RootedAuto.String(), "broadcast and reduce schedule: "+allreduce.RootedScheduleNames()+" (auto: the cost model's choice per size, see -explain; tree: the binomial tree; chain: the pipelined chain, 3 ranks or more), a comma-separated list of them (one sweep each), or all")
		dtype   = fs.String("dtype", "float32", "element type: "+names(dtypes))
		redop   = fs.String("redop", "sum", "reduction: "+names(redops)+" (avg needs a floating-point -dtype)")
		minS    = fs.String("min", "8", "smallest size in bytes (K, M, G suffixes: 8, 64K, 256M)")
		maxS    = fs.String("max", "64M", "largest size in bytes (K, M, G suffixes)")
		factor  = fs.Int("factor", 2, "multiply the size by this each row (1 only when -min equals -max)")
		iters   = fs.Int("iters", 20, "timed iterations per size")
		warmup  = fs.Int("warmup", 5, "untimed iterations per size before the timed ones (a sweep's first size runs up to 100 more, fresh endpoints settling; none with 0)")
		b2b     = fs.Bool("back-to-back", false, "start each iteration of a size when the rank's last one ends, with a barrier before the first only (as nccl-tests does, and as a training step's buckets follow one another), instead of a barrier before every iteration: the time of an iteration is then the period of a stream of them, with no idle link between them")
		check   = fs.Bool("check", true, "after the timed iterations, run once more on fresh inputs and count wrong elements against a sequential reference")
		jsonOut = fs.Bool("json", false, "print one JSON object per row instead of the table")
		root    = fs.Int("root", 0, "root rank of broadcast and reduce")
		cpuprof = fs.String("cpuprofile", "", "write a CPU profile of the run to this file (with -transport tcp, each rank r writes FILE.rank<r>)")
		local   = fs.Int("local-size", 0, "in-process or simulated ranks are on nodes of this many consecutive ranks (the last node smaller when it does not divide -ranks), for -algo hierarchical, torus and mesh; 0: no topology (sim: one node). With -transport tcp each rank's node is $RINGDDP_NODE, else its host name")
		tf      launch.TransportFlags // -transport, -timeout and the multi-process flags
		xf      extFlags              // -transport sim, the cost model, -explain, -plot, -calibrate
	)
	tf.Register(fs)
	xf.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: bench [flags]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: bench takes flags only (see -h)", fs.Arg(0))
	}

	cfg := &config{
		transport: tf.Name, ranks: *ranks, algo: *algo, redopName: *redop,
		factor: *factor, iters: *iters, warmup: *warmup, backToBack: *b2b, check: *check,
		json: *jsonOut, root: *root, args: args, cpuprof: *cpuprof, localSize: *local,
	}
	var ok bool
	if cfg.op, ok = collectives[*op]; !ok {
		return nil, fmt.Errorf("-op %q: unknown collective (valid: %s)", *op, names(collectives))
	}
	// -transport sim is this command's own: the launch layer resolves the
	// flags of in-process ranks for it (-timeout; no multi-process flags).
	if tf.Name == simTransport {
		tf.Name = launch.Inproc
	} else if err := tf.CheckName(); err != nil {
		return nil, fmt.Errorf("-transport %q: unknown transport (valid: %s, %s)", tf.Name, launch.TransportNames(), simTransport)
	}
	if *algo == "" {
		*algo = allreduce.Auto.String()
	}
	cfg.algo = *algo
	var err error
	if err := cfg.resolveElements(*dtype, *redop); err != nil {
		return nil, err
	}
	if cfg.ranks < 1 {
		return nil, fmt.Errorf("-ranks %d: need at least 1", cfg.ranks)
	}
	// -transport tcp: this process is a rank of a launched job (whose world
	// size -ranks becomes) or its launcher.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["schedule"] && !cfg.op.rooted {
		return nil, fmt.Errorf("-schedule applies to -op broadcast and reduce, not %s", cfg.op.name)
	}
	if cfg.schedules, err = parseSchedules(*sched); err != nil {
		return nil, err
	}
	if cfg.tr, err = tf.Resolve(cfg.ranks, given, os.Getenv); err != nil {
		return nil, err
	}
	cfg.ranks, cfg.mp = cfg.tr.Ranks, cfg.tr.MP
	switch {
	case cfg.localSize < 0:
		return nil, fmt.Errorf("-local-size %d: must not be negative", cfg.localSize)
	case cfg.localSize > 0 && cfg.mp != nil:
		return nil, fmt.Errorf("-local-size applies to -transport inproc and sim only; over tcp set RINGDDP_NODE per rank to name its node")
	}
	if err := xf.resolve(cfg, given); err != nil {
		return nil, err
	}
	if err := cfg.resolveInproc(); err != nil {
		return nil, err
	}
	if err := cfg.resolveSweep(*minS, *maxS); err != nil {
		return nil, err
	}
	if !cfg.op.rooted {
		cfg.root = -1
	}
	return cfg, nil
}

// resolveElements reads -dtype and -redop.
func (cfg *config) resolveElements(dtype, redop string) error {
	var ok bool
	if cfg.dtype, ok = dtypes[dtype]; !ok {
		return fmt.Errorf("-dtype %q: unknown element type (valid: %s)", dtype, names(dtypes))
	}
	if cfg.redop, ok = redops[redop]; !ok {
		return fmt.Errorf("-redop %q: unknown reduction (valid: %s)", redop, names(redops))
	}
	if cfg.redop == allreduce.Avg && !cfg.dtype.IsFloat() {
		return fmt.Errorf("-redop avg needs a floating-point -dtype (float32, float64, float16 or bfloat16), not %s", cfg.dtype)
	}
	return nil
}

// resolveInproc gives in-process ranks their nodes (-local-size) and
// checks that every -algo runs there.
func (cfg *config) resolveInproc() error {
	if cfg.transport != launch.Inproc {
		return nil
	}
	cfg.tr.LocalSize = cfg.localSize
	for _, a := range cfg.algos {
		if err := inprocRuns(a, cfg.localSize); err != nil {
			return fmt.Errorf("-algo %s: %w (in process, -local-size K or -nodes K simulates nodes)", a, err)
		}
	}
	return nil
}

// resolveSweep checks the sweep's flags (-iters, -warmup, -min, -max,
// -factor, -root) and reads the sizes.
func (cfg *config) resolveSweep(minS, maxS string) error {
	var err error
	if cfg.iters < 1 {
		return fmt.Errorf("-iters %d: need at least 1", cfg.iters)
	}
	if cfg.warmup < 0 {
		return fmt.Errorf("-warmup %d: must not be negative", cfg.warmup)
	}
	if cfg.minBytes, err = bytesize.Parse(minS); err != nil {
		return fmt.Errorf("-min: %w", err)
	}
	if cfg.maxBytes, err = bytesize.Parse(maxS); err != nil {
		return fmt.Errorf("-max: %w", err)
	}
	if cfg.minBytes > cfg.maxBytes {
		return fmt.Errorf("-min %s is larger than -max %s", minS, maxS)
	}
	switch {
	case cfg.factor == 1 && cfg.minBytes != cfg.maxBytes:
		return fmt.Errorf("-factor 1 needs -min equal to -max (got -min %s, -max %s); use -factor 2 or more", minS, maxS)
	case cfg.factor < 1:
		return fmt.Errorf("-factor %d: need at least 2 (1 only when -min equals -max)", cfg.factor)
	case cfg.minBytes == 0 && cfg.maxBytes > 0:
		return errors.New("-min 0: sizes grow by multiplying, so -min must be at least 1 byte unless -max is 0 too")
	}
	if cfg.op.rooted && (cfg.root < 0 || cfg.root >= cfg.ranks) {
		return fmt.Errorf("-root %d: out of range for -ranks %d (valid: 0..%d)", cfg.root, cfg.ranks, cfg.ranks-1)
	}
	return nil
}

// inprocRuns reports why in-process ranks on nodes of localSize (0: no
// topology) cannot run algo, before any rank starts.
func inprocRuns(algo allreduce.Algorithm, localSize int) error {
	w, err := inproc.NewWorld(1, inproc.WithLocalSize(localSize))
	if err != nil {
		return err
	}
	g, err := allreduce.NewGroup(w.Conn(0), allreduce.WithAlgorithm(algo))
	if err != nil {
		return err
	}
	return g.Close()
}

// startCPUProfile starts -cpuprofile for this process's ranks and returns
// the function that stops it.
func startCPUProfile(cfg *config) (func(), error) {
	if cfg.cpuprof == "" {
		return func() {}, nil
	}
	path := cfg.cpuprof
	if cfg.mp != nil {
		path += fmt.Sprintf(".rank%d", cfg.mp.Env.Rank)
	}
	f, err := outfile.Create(path, outfile.Shared) // a symbolic link at path is replaced, not followed
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Abort()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Commit(); err != nil {
			fmt.Fprintf(os.Stderr, "-cpuprofile: %v\n", err)
		}
	}, nil
}

// sizes are the byte sizes of the rows, before rounding to whole elements.
func (c *config) sizes() []int {
	var out []int
	for s := c.minBytes; s <= c.maxBytes; s *= c.factor {
		out = append(out, s)
		if s == 0 || c.factor == 1 || s > math.MaxInt/c.factor {
			break
		}
	}
	return out
}

// count is the element count of a row of size bytes: whole elements, and for
// all-gather and reduce-scatter a multiple of the number of ranks.
func (c *config) count(size int) int {
	n := size / c.dtype.Size()
	if c.op.gathered {
		n -= n % c.ranks
	}
	return n
}
