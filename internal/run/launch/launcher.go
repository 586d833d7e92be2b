package launch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long stopped ranks get between SIGTERM and SIGKILL.
const DefaultGrace = 5 * time.Second

// Config describes the ranks a launcher starts on this host.
type Config struct {
	Ranks    int    // ranks on this host (-ranks); at least 1
	Nnodes   int    // hosts in the job (-nnodes); default 1; with -nnodes MIN:MAX, MIN
	MaxNodes int    // MAX of -nnodes MIN:MAX: the most hosts the job may grow to (0: Nnodes; nodes_scaleup.go)
	NodeRank int    // this host's index (-node-rank)
	Master   string // host:port of rank 0's store (-master); "" on one host: 127.0.0.1 and a free port
	Insecure bool   // run without a secret (-insecure)

	// Path is the program each rank runs; default os.Executable().
	Path string
	// Args are its arguments (without the program name); nil is
	// os.Args[1:]. Commands pass their own arguments, so every rank parses
	// the same command line.
	Args []string
	// Env is added to every rank's environment (KEY=VALUE), after this
	// process's environment and the launcher's variables.
	Env []string
	// Getenv reads RINGDDP_SECRET and RINGDDP_RUN_ID (default os.Getenv).
	Getenv func(string) string

	// Stdout and Stderr receive the ranks' output, line by line, prefixed
	// with "[rank r] " — rank 0's stdout unprefixed unless PrefixRank0.
	// Default os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	PrefixRank0    bool

	// Grace is how long ranks stopped after another's failure get between
	// SIGTERM and SIGKILL. Default 5 s.
	Grace time.Duration
	// NoSignals: do not catch and forward this process's interrupt and
	// SIGTERM (tests).
	NoSignals bool

	// Elastic, with MaxRestarts > 0, restarts the job after a failure
	// (elastic.go); nil or MaxRestarts 0: a failure ends the job.
	Elastic *Elastic

	// JoinTimeout, with several nodes, is how long the launchers wait for
	// each other before the ranks start (-join-timeout; Elastic.JoinTimeout
	// takes precedence). Default DefaultJoinTimeout.
	JoinTimeout time.Duration

	// joinReport is how often a launcher waiting for the others says whom
	// it waits for, and rejectedGrace how long node 0 waits on after a
	// connection failed authentication while nodes are missing (tests
	// shorten them). Defaults defaultJoinReport, defaultRejectedGrace.
	joinReport, rejectedGrace time.Duration
	// heartbeat is how often a node's launcher tells node 0 it is alive,
	// and heartbeatLost how long node 0 waits for a beat before it takes
	// the node for lost (nodes_lost.go). Defaults defaultHeartbeat,
	// defaultHeartbeatLost.
	heartbeat, heartbeatLost time.Duration
}

// ExitError is a launcher's failure: the first rank that exited with a
// non-zero status or was killed by a signal.
type ExitError struct {
	Rank  int
	Pid   int
	State *os.ProcessState // nil if the rank could not be started
	Err   error            // set when State is nil
}

func (e *ExitError) Error() string {
	if nl, ok := e.Err.(*NodeLostError); ok && e.State == nil {
		return nl.Error() // the node names its ranks
	}
	if e.State == nil && e.Pid > 0 { // another node's rank, as its launcher reported it
		return fmt.Sprintf("rank %d (pid %d) %v", e.Rank, e.Pid, e.Err)
	}
	if e.State == nil {
		return fmt.Sprintf("rank %d: %v", e.Rank, e.Err)
	}
	return fmt.Sprintf("rank %d (pid %d) %s", e.Rank, e.Pid, describeExit(e.State))
}

func (e *ExitError) Unwrap() error { return e.Err }

// Reason says how the rank ended, without naming it: "exited with status
// 3", "was killed by signal killed", or why it could not be started.
func (e *ExitError) Reason() string {
	if e.State == nil {
		return e.Err.Error()
	}
	return describeExit(e.State)
}

// describeExit says how a process ended: "exited with status 3", "was
// killed by signal killed".
func describeExit(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by signal " + ws.Signal().String()
	}
	return "exited with status " + strconv.Itoa(st.ExitCode())
}

// launchVars are the variables the launcher sets; inherited values of them
// are dropped first.
var launchVars = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"MASTER_ADDR", "MASTER_PORT", EnvSecret, EnvInsecure, EnvRunID, EnvStoreFD, EnvStatusFD, EnvRestart}

// Run starts cfg.Ranks copies of the program as ranks of one job and waits
// for them: it returns nil when every rank exits with status 0, and an
// *ExitError naming the first rank that failed otherwise, after stopping
// the others. See the package documentation for the environment each rank
// gets, the output and the signals. With cfg.Elastic a failed job is
// started again (elastic.go) and the error, once restarts are exhausted,
// is a *RestartsExhaustedError naming every failure.
//
// Cancelling ctx stops the ranks as a failure does (SIGTERM, then SIGKILL
// after Grace) and returns ctx's error. Commands whose ranks handle an
// interrupt themselves should pass a context that Ctrl-C does not cancel:
// Run forwards the interrupt.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	var sigs chan os.Signal
	if !cfg.NoSignals {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	w := newOutputs(cfg)
	if cfg.mostNodes() > 1 { // the launchers meet first, restarts or not (nodes.go)
		return runNodes(ctx, cfg, w, sigs)
	}
	if cfg.Elastic != nil && (cfg.Elastic.MaxRestarts > 0 || cfg.Elastic.Continue) {
		return runElastic(ctx, cfg, w, sigs)
	}
	j, err := startAttempt(cfg, w, attempt{ranks: cfg.Ranks, args: cfg.Args, getenv: cfg.Getenv})
	if err != nil {
		return err
	}
	return j.wait(ctx, sigs)
}

// withDefaults checks cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Ranks < 1 {
		return cfg, fmt.Errorf("launch: %d ranks: need at least 1", cfg.Ranks)
	}
	if cfg.Nnodes < 1 {
		cfg.Nnodes = 1
	}
	if cfg.MaxNodes != 0 && (cfg.MaxNodes < cfg.Nnodes || cfg.MaxNodes > maxNodes) {
		return cfg, fmt.Errorf("launch: -nnodes %d:%d: want MIN ≤ MAX ≤ %d", cfg.Nnodes, cfg.MaxNodes, maxNodes)
	}
	if cfg.NodeRank < 0 || cfg.NodeRank >= cfg.mostNodes() {
		return cfg, fmt.Errorf("launch: node rank %d out of range for %s", cfg.NodeRank, Count(cfg.mostNodes(), "node"))
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Path == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("launch: finding this program to start the ranks: %w", err)
		}
		cfg.Path = exe
	}
	if cfg.Args == nil {
		cfg.Args = os.Args[1:]
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.JoinTimeout < 0 {
		return cfg, fmt.Errorf("launch: join timeout %v: must not be negative", cfg.JoinTimeout)
	}
	cfg.joinReport = cmp.Or(cfg.joinReport, defaultJoinReport)
	cfg.rejectedGrace = cmp.Or(cfg.rejectedGrace, defaultRejectedGrace)
	cfg.heartbeat = cmp.Or(cfg.heartbeat, defaultHeartbeat)
	cfg.heartbeatLost = cmp.Or(cfg.heartbeatLost, defaultHeartbeatLost)
	if cfg.Elastic == nil && cfg.mostNodes() > 1 {
		cfg.Elastic = &Elastic{} // no restarts: the nodes' rendezvous only
	}
	if cfg.Elastic != nil {
		if err := cfg.Elastic.check(cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// attempt is one start of the job's ranks on this host.
type attempt struct {
	ranks  int      // ranks on this host
	args   []string // their arguments
	env    []string // added to cfg.Env (RINGDDP_RESTART)
	getenv func(string) string
	status *os.File // the write end of the status pipe every rank inherits (nil: none)

	// Several nodes restarting together (nodes.go): this attempt's node
	// count and this node's rank in it, rank 0's store (host:port, in
	// place of cfg.Master) and, on node 0, its bound socket for rank 0
	// (owned by the attempt: closed once handed over).
	nnodes, nodeRank int
	master           string
	storeLn          *os.File
	onFail           func(*ExitError) // job.onFail
	stopReq          <-chan string    // job.stopReq

	// survive, with -on-failure continue, hosts the store on the socket
	// bound for it (rank 0 does not) and coordinates the generations.
	survive *survival
	// joinNames, for a node rejoining a running job (nodes_rejoin.go):
	// its ranks are started to join, named so (EnvJoinName).
	joinNames []int
}

// startAttempt starts a's ranks, their output forwarded to w; the job's
// wait collects them. A rank that cannot be started is the job's first
// failure.
func startAttempt(cfg Config, w outputs, a attempt) (*job, error) {
	if a.ranks < 1 || a.ranks > maxNodeRanks {
		if a.storeLn != nil {
			a.storeLn.Close()
		}
		return nil, fmt.Errorf("launch: %d ranks on this host: want 1..%d", a.ranks, maxNodeRanks)
	}
	cfg.Ranks = a.ranks
	if a.master != "" {
		cfg.Nnodes, cfg.NodeRank, cfg.Master = a.nnodes, a.nodeRank, a.master
	}
	vars, storeLn, err := jobVars(cfg, a.getenv)
	if err != nil {
		if a.storeLn != nil {
			a.storeLn.Close()
		}
		return nil, err
	}
	if a.storeLn != nil {
		storeLn = a.storeLn
	}
	lead, err := a.survive.hostStore(&storeLn, &vars, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if storeLn != nil {
			storeLn.Close()
		}
	}()
	base := filterEnv(os.Environ(), launchVars)
	if _, ok := os.LookupEnv("GOMAXPROCS"); !ok {
		// The host's processors shared among its ranks, as in-process ranks
		// share them: no more scheduler threads than cores, which cuts
		// small-message latency on a busy host (see docs/multiprocess.md).
		vars = append(vars, "GOMAXPROCS="+strconv.Itoa(coreShare(cfg.Ranks)))
	}
	if v, ok := os.LookupEnv(EnvBind); !ok {
		// Each rank pinned to its share of them, as mpirun binds to cores.
		vars = append(vars, EnvBind+"=core")
	} else if err := checkBind(v); err != nil {
		return nil, err // before any rank starts (the deferred close ends the store's socket)
	}

	j := &job{cfg: cfg, errOut: w.errOut, exits: make(chan exit, cfg.Ranks), onFail: a.onFail, stopReq: a.stopReq, survive: a.survive}
	if a.survive != nil {
		j.failReq = a.survive.fallback
		a.survive.setSpawn(j.spawner(cfg, w, a, base, vars, lead))
	}

	for local := range cfg.Ranks {
		rank := cfg.NodeRank*cfg.Ranks + local
		cmd := exec.Command(cfg.Path, a.args...)
		cmd.Env = rankEnv(cfg, base, vars, a.env, local)
		if a.joinNames != nil {
			rank = a.joinNames[local]
			cmd.Env = append(cmd.Env, EnvJoinName+"="+strconv.Itoa(rank))
		}
		p := &proc{rank: rank, cmd: cmd}
		flush := w.forward(cmd, cfg, rank, p.lastLine, lead)
		if rank == 0 && storeLn != nil {
			// Rank 0 serves the store on the socket bound here, so no
			// other process can take the port between the pick and its
			// listen (RINGDDP_STORE_FD).
			cmd.ExtraFiles = []*os.File{storeLn}
			cmd.Env = append(cmd.Env, EnvStoreFD+"=3")
		}
		if a.status != nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, a.status)
			cmd.Env = append(cmd.Env, EnvStatusFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
		}
		cmd.SysProcAttr = sysProcAttr()
		cmd.WaitDelay = cfg.Grace
		if err := cmd.Start(); err != nil {
			j.fail(&ExitError{Rank: rank, Err: fmt.Errorf("starting %s: %w", cfg.Path, err)})
			break
		}
		if a.survive != nil {
			a.survive.started(rank, cmd.Process.Pid)
		}
		if rank == 0 && storeLn != nil {
			// Rank 0 holds its own copy now. Were this one kept, peers of
			// a rank 0 that died would connect to a socket nobody serves.
			storeLn.Close()
			storeLn = nil
		}
		j.procs = append(j.procs, p)
		go func() {
			err := cmd.Wait()
			for _, lw := range flush {
				lw.flush()
			}
			j.exits <- exit{p: p, err: err}
		}()
	}
	return j, nil
}

// rankEnv is the environment of local rank local: the launcher's own
// (base), the job's variables, the rank's torchrun variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK), then the
// attempt's and the configuration's additions, later ones winning.
func rankEnv(cfg Config, base, vars, attemptEnv []string, local int) []string {
	env := append([]string(nil), base...)
	env = append(env, vars...)
	env = append(env,
		"RANK="+strconv.Itoa(cfg.NodeRank*cfg.Ranks+local),
		"WORLD_SIZE="+strconv.Itoa(cfg.Nnodes*cfg.Ranks),
		"LOCAL_RANK="+strconv.Itoa(local),
		"LOCAL_WORLD_SIZE="+strconv.Itoa(cfg.Ranks),
		"GROUP_RANK="+strconv.Itoa(cfg.NodeRank))
	env = append(env, attemptEnv...)
	return append(env, cfg.Env...)
}

// filterEnv drops the variables named in drop from env.
func filterEnv(env, drop []string) []string {
	out := env[:0:0]
outer:
	for _, kv := range env {
		for _, k := range drop {
			if strings.HasPrefix(kv, k+"=") {
				continue outer
			}
		}
		out = append(out, kv)
	}
	return out
}

// proc is one started rank.
type proc struct {
	rank int
	cmd  *exec.Cmd
	done bool
	mu   sync.Mutex // guards rec.lastErr, written by the stderr forwarder
	rec  rankRecord // what the launcher saw of it (rootcause.go)
}

type exit struct {
	p   *proc
	err error
}

// job tracks the started ranks until they have all exited.
type job struct {
	cfg    Config
	errOut io.Writer
	procs  []*proc
	exits  chan exit

	sent     map[os.Signal]bool // the signals the launcher has sent its ranks
	first    *ExitError         // the first failure
	failedAt time.Time          // when it was seen
	stopping bool               // the ranks were told to stop
	// signaled is the last signal forwarded to the ranks: they stop on
	// their own, so a non-zero exit no longer stops the others; after is
	// the first such exit.
	signaled os.Signal
	after    *ExitError

	// progress, when not nil, is notified when a rank reports progress on
	// the status pipe (elastic.go); wait then calls onProgress.
	progress   <-chan struct{}
	onProgress func()

	// Several nodes (nodes.go): onFail, if set, is called with this node's
	// first failure as it happens; a message on stopReq (another node's
	// failure) stops the ranks, and stoppedAt says when it came.
	onFail    func(*ExitError)
	stopReq   <-chan string
	stoppedAt time.Time

	// With -on-failure continue: survive takes the failures of members
	// (survive_lead.go), and a failure on failReq (the job falls back to
	// a restart) ends the attempt.
	survive *survival
	failReq <-chan *ExitError
	// added carries the joiners the coordinator starts (survive_spawn.go);
	// over is closed once wait has collected every process.
	added chan *proc
	over  chan struct{}
}

// fail records a rank's failure; the first one stops the job.
func (j *job) fail(e *ExitError) {
	if j.first == nil {
		j.first, j.failedAt = e, time.Now()
		j.snapshotStates()
		if j.onFail != nil {
			j.onFail(e)
		}
	}
}

// wait collects every rank's exit, forwarding signals and stopping the job
// on the first failure (or when ctx ends).
func (j *job) wait(ctx context.Context, sigs chan os.Signal) error {
	var kill <-chan time.Time
	running := len(j.procs)
	ctxDone := ctx.Done()
	if j.first != nil { // a rank did not start
		j.stop(fmt.Sprintf("launch: %v; stopping the other ranks", j.first))
	}
	for running > 0 {
		if j.stopping && kill == nil {
			t := time.NewTimer(j.cfg.Grace)
			defer t.Stop()
			kill = t.C
		}
		select {
		case e := <-j.exits:
			running--
			e.p.done = true
			e.p.exited(j.sentSignal)
			if e.err == nil || j.stopping {
				j.stopRemoved()
				continue
			}
			if st := e.p.cmd.ProcessState; st != nil && st.Success() {
				j.stopRemoved()
				continue // status 0, but something it started kept its output open (exec.ErrWaitDelay)
			}
			ee := &ExitError{Rank: e.p.rank, Pid: e.p.cmd.Process.Pid, State: e.p.cmd.ProcessState}
			if ee.State == nil {
				ee.Err = e.err
			}
			if j.signaled != nil {
				if j.after == nil {
					j.after = ee
				}
				continue
			}
			if j.survive != nil && j.survive.absorb(ee) {
				j.stopRemoved()
				continue
			}
			j.fail(ee)
			j.stop(fmt.Sprintf("launch: %v; stopping the other ranks", ee))
		case s := <-sigs:
			j.signaled = s
			j.signal(s)
		case <-ctxDone:
			ctxDone = nil
			j.stop(fmt.Sprintf("launch: %v; stopping the ranks", context.Cause(ctx)))
		case <-kill:
			j.signal(syscall.SIGKILL)
		case <-j.progress:
			j.onProgress()
		case ee := <-j.failReq:
			j.failReq = nil
			if j.first == nil && !j.stopping && j.signaled == nil {
				j.fail(ee)
				j.stop(fmt.Sprintf("launch: %v; stopping the other ranks", ee))
			}
		case msg := <-j.stopReq:
			j.stopReq = nil
			if j.first == nil && !j.stopping && j.signaled == nil {
				j.stoppedAt = time.Now()
				j.stop(msg)
			}
		case p := <-j.added:
			running++
			j.procs = append(j.procs, p)
			if j.stopping {
				signalProc(p.cmd.Process, syscall.SIGTERM)
			}
		}
	}
	if j.over != nil {
		close(j.over)
	}
	j.awaitFallback(ctx)
	if j.first != nil {
		if rc := j.rootCause(); rc != nil {
			return fmt.Errorf("launch: %w", rc)
		}
		return fmt.Errorf("launch: %w", j.first)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if j.after != nil {
		// The ranks ended because the job was interrupted, not because one
		// failed: say so first, then how the first of them ended.
		return fmt.Errorf("launch: stopped by %v: the job was interrupted and every rank was asked to stop (the first to end, %w)", j.signaled, j.after)
	}
	return nil
}

// stop sends SIGTERM to every running rank (SIGKILL follows after Grace).
func (j *job) stop(msg string) {
	if j.stopping {
		return
	}
	j.stopping = true
	fmt.Fprintln(j.errOut, msg)
	j.signal(syscall.SIGTERM)
	// A stopped rank (SIGSTOP, ^Z, a debugger) handles SIGTERM only once
	// continued: continue it so that it ends now, not after Grace.
	j.signal(syscall.SIGCONT)
}

// sentSignal says whether the launcher has sent its ranks signal s.
func (j *job) sentSignal(s os.Signal) bool { return j.sent[s] }

// signal sends s to every running rank's process group.
func (j *job) signal(s os.Signal) {
	if j.sent == nil {
		j.sent = map[os.Signal]bool{}
	}
	j.sent[s] = true
	for _, p := range j.procs {
		if !p.done {
			signalProc(p.cmd.Process, s)
		}
	}
}
