package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/bytesize"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// simTransport is -transport sim: every rank a virtual rank of the
// simulator (package allreduce/sim) in this process.
const simTransport = "sim"

// The -sim-payload modes.
const (
	payloadAuto = "auto" // real payloads while ranks × bytes ≤ simRealLimit, timing-only above
	payloadReal = "real" // always real payloads (checked)
	payloadNone = "none" // always timing-only (not checked)
)

// simRealLimit is -sim-payload auto's limit on ranks × bytes for a size to
// run with real (allocated, checked) payloads. A real row holds every
// rank's input and buffer, the algorithms' scratch and the messages in
// flight (the simulator copies each), several times ranks × bytes at its
// peak: at this limit a sweep of every algorithm on 1024 ranks peaks
// near 2.5 GiB, twice the limit near 4.4 GiB.
const simRealLimit = 256 << 20

// extFlags are the flags of the simulator, the cost model and the modes
// built on it (-explain, -plot, -calibrate), beside the benchmark's own.
type extFlags struct {
	nodes     int
	payload   string
	overlap   bool
	model     modelFlags
	explain   bool
	compare   string
	plot      string
	trace     string
	calibrate string
	calibMax  string
}

func (f *extFlags) register(fs *flag.FlagSet) {
	if t := fs.Lookup("transport"); t != nil { // registered by launch.TransportFlags, which knows inproc and tcp
		t.Usage += ", or " + simTransport + " (the simulator: virtual ranks with virtual clocks in this process, links and reduce cost from the cost model)"
	}
	fs.IntVar(&f.nodes, "nodes", 0, "with -transport sim or inproc: split the ranks into this many nodes of ⌈ranks/nodes⌉ consecutive ranks (instead of -local-size); 0: not given")
	fs.StringVar(&f.payload, "sim-payload", payloadAuto, "with -transport sim: auto (real, checked payloads while ranks × bytes ≤ "+bytesize.Format(simRealLimit)+", timing-only above), real (always) or none (always timing-only: bytes accounted, never allocated, not checked)")
	fs.BoolVar(&f.overlap, "sim-overlap", false, "with -transport sim: give every simulated rank two endpoints, one for its node's ranks and one for the others, as -transport auto has (shm within a host, tcp between; sim.Config.Overlap): hierarchical and torus then pipeline their blocks over them, as on the test bed, and the model prices them so")
	f.model.register(fs)
	fs.BoolVar(&f.explain, "explain", false, "print, per size, every runnable all-reduce algorithm's predicted time under the cost model and auto's pick (allreduce.Predict, allreduce.Choose), and run nothing; with -op broadcast or reduce, the binomial tree's and the chain's and the one a group runs (allreduce.PredictRooted)")
	fs.StringVar(&f.compare, "compare", "", "check earlier runs against the cost model, running nothing: the -json rows of runs of one sweep (files or globs, comma-separated; several runs of it, say alternating with other work); prints per all-reduce algorithm and size the median of the runs' times against the prediction for -transport and -ranks under the model (-profile, the model flags or the default, as -explain), and per algorithm how many sizes are within 25% (docs/scaling.md's accuracy tables; bench/accuracy.sh makes the runs)")
	fs.StringVar(&f.plot, "plot", "", "after the run, draw busbw and time against size, one line per algorithm, into this PNG file (with -transport tcp, rank 0's process writes it)")
	fs.StringVar(&f.trace, "trace", "", "write every rank's collectives (each call: algorithm, bytes, iteration) as a Chrome trace-event timeline to this file (chrome://tracing, ui.perfetto.dev), a track per rank; multi-process ranks' clocks aligned to rank 0's")
	fs.StringVar(&f.calibrate, "calibrate", "", "measure this machine's cost model over -transport inproc or tcp (a ring exchange among all the ranks for α and β, the same with a reducing sink for γ), time every runnable algorithm over the sweep, and write the profile to this JSON file")
	fs.StringVar(&f.calibMax, "calib-max", "64M", "with -calibrate: the ring exchange's largest message (from 8 B, doubling)")
}

// resolve checks the flags against the transport and fills cfg's
// topology, simulator, model, mode and algorithm fields. cfg's transport,
// ranks, local size and collective are resolved already; given names the
// flags set on the command line.
func (f *extFlags) resolve(cfg *config, given map[string]bool) error {
	sim := cfg.transport == simTransport
	cfg.explain, cfg.plot, cfg.calibrate, cfg.compare = f.explain, f.plot, f.calibrate, f.compare
	cfg.algoGiven = given["algo"]
	cfg.timeline = newTimeline(f.trace)
	if err := f.resolveNodes(cfg, given); err != nil {
		return err
	}
	switch f.payload {
	case payloadAuto, payloadReal, payloadNone:
		cfg.payload = f.payload
	default:
		return fmt.Errorf("-sim-payload %q: unknown mode (valid: %s, %s, %s)", f.payload, payloadAuto, payloadReal, payloadNone)
	}
	if given["sim-payload"] && !sim {
		return fmt.Errorf("-sim-payload applies to -transport %s only", simTransport)
	}
	if f.overlap && !sim {
		return fmt.Errorf("-sim-overlap applies to -transport %s only (-transport auto overlaps by itself)", simTransport)
	}
	cfg.simOverlap = f.overlap
	if err := f.checkModes(cfg, given); err != nil {
		return err
	}
	var err error
	if cfg.calibrate != "" {
		if cfg.calibMax, err = bytesize.Parse(f.calibMax); err != nil {
			return fmt.Errorf("-calib-max: %w", err)
		}
		if cfg.calibMax < 8 {
			return fmt.Errorf("-calib-max %s: need at least 8 bytes", f.calibMax)
		}
		cfg.calibCores = runtime.NumCPU()
		if given["cores"] {
			if f.model.cores < 0 {
				return fmt.Errorf("-cores %d: need 0 or more", f.model.cores)
			}
			cfg.calibCores = f.model.cores
		}
	} else if given["calib-max"] {
		return errors.New("-calib-max applies to -calibrate only")
	}
	if cfg.calibrate == "" { // -calibrate measures the model instead
		if cfg.model, cfg.modelFrom, err = f.model.resolve(cfg.transport, peerMemory(cfg.transport), given, os.Getenv); err != nil {
			return err
		}
	}
	if cfg.algos, err = parseAlgos(cfg.algo, cfg.op, plannedShape(cfg)); err != nil {
		return err
	}
	if cfg.transport != launch.Inproc { // in process, parseConfig asks NewGroup itself
		ok := runnable(plannedShape(cfg))
		for _, a := range cfg.algos {
			if a != allreduce.Auto && !slices.Contains(ok, a) {
				return fmt.Errorf("-algo %s: cannot run on -transport %s (runnable there: %s)", a, cfg.transport, algoNames(ok))
			}
		}
	}
	if cfg.calibrate != "" {
		if !given["algo"] { // every algorithm, auto aside: it runs one of them
			cfg.algos = runnable(plannedShape(cfg))
		}
		for _, a := range cfg.algos {
			if a == allreduce.Auto {
				return errors.New("-algo auto: -calibrate measures the algorithms themselves (auto runs one of them)")
			}
		}
	}
	if sim {
		// Virtual time is deterministic: one timed iteration per size.
		cfg.iters, cfg.warmup = 1, 0
	}
	return nil
}

// resolveNodes checks -nodes and derives the local size from it.
func (f *extFlags) resolveNodes(cfg *config, given map[string]bool) error {
	if !given["nodes"] {
		return nil
	}
	k, n := f.nodes, cfg.ranks
	switch {
	case cfg.transport == launch.TCP:
		return errors.New("-nodes applies to -transport sim and inproc only; over tcp set RINGDDP_NODE per rank to name its node")
	case given["local-size"]:
		return errors.New("-nodes and -local-size both say how ranks sit on nodes: give one")
	case k < 1 || k > n:
		return fmt.Errorf("-nodes %d: need 1 to -ranks (%d)", k, n)
	}
	ls := (n + k - 1) / k
	if got := (n + ls - 1) / ls; got != k {
		return fmt.Errorf("-nodes %d: %d ranks do not split into %d nodes of consecutive ranks (nodes of ⌈%d/%d⌉ = %d ranks make %d); use -local-size", k, n, k, n, k, ls, got)
	}
	cfg.nodes, cfg.localSize = k, ls
	if k == 1 {
		cfg.localSize = n
	}
	return nil
}

// checkModes reports flags that do not go together: -explain runs
// nothing, -calibrate measures a real transport's model, and the
// multi-algorithm lists are for all-reduce.
func (f *extFlags) checkModes(cfg *config, given map[string]bool) error {
	switch {
	case f.explain && f.calibrate != "":
		return errors.New("-explain and -calibrate: give one (-explain predicts, -calibrate measures)")
	case f.explain && f.plot != "":
		return errors.New("-plot draws a run's rows; -explain runs nothing")
	case f.compare != "" && (f.explain || f.calibrate != "" || f.plot != ""):
		return errors.New("-compare reads earlier runs and runs nothing: leave out -explain, -calibrate and -plot")
	case f.compare != "" && cfg.json:
		return errors.New("-compare prints a table: leave out -json")
	case f.compare != "" && cfg.op.kind != allreduce.KindAllReduce:
		return fmt.Errorf("-compare checks all-reduce runs: -op %s is not allowed with it", cfg.op.name)
	case f.explain && cfg.op.kind != allreduce.KindAllReduce && cfg.op.kind != allreduce.KindBroadcast && cfg.op.kind != allreduce.KindReduce:
		return fmt.Errorf("-explain -op %s: %s has one algorithm (the ring), no choice to explain (-op allreduce, broadcast or reduce)", cfg.op.name, cfg.op.name)
	}
	if f.calibrate == "" {
		return nil
	}
	switch {
	case cfg.transport == simTransport:
		return fmt.Errorf("-calibrate measures a real transport: -transport %s or %s, not %s", launch.Inproc, launch.TCP, simTransport)
	case cfg.op.kind != allreduce.KindAllReduce:
		return fmt.Errorf("-calibrate times all-reduce: -op %s is not allowed with it", cfg.op.name)
	case cfg.ranks < 2:
		return fmt.Errorf("-calibrate needs -ranks 2 or more (the ring exchange needs two), got %d", cfg.ranks)
	case cfg.json:
		return errors.New("-calibrate writes its report as text (the profile is the JSON): leave out -json")
	}
	for _, name := range append(modelFlagNames(), "profile") {
		if given[name] && name != "cores" { // the host's cores: not measured
			return fmt.Errorf("-%s: -calibrate measures the model, so it takes no model flags", name)
		}
	}
	return nil
}
