package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The commands' transport layer, shared by cmd/train and cmd/bench: the
// -transport and -timeout flags beside the multi-process Flags
// (TransportFlags), resolved against each other and the environment into a
// Transport, which connects this process's endpoints or, as the launcher
// of a tcp job, starts the ranks.

// The -transport values.
const (
	Inproc = "inproc" // every rank a goroutine of this process
	TCP    = "tcp"    // one rank per process, on this host or several
	Shm    = "shm"    // one rank per process, all on this host, over shared memory
	Auto   = "auto"   // one rank per process: shm when all share this host, tcp when none do, else shm within hosts and tcp between (package mixed)
)

// transportNames are the -transport values, sorted.
var transportNames = []string{Auto, Inproc, Shm, TCP}

// multiProcess reports whether -transport name runs one rank per process
// (launched like tcp).
func multiProcess(name string) bool { return name == TCP || name == Shm || name == Auto }

// DefaultInprocTimeout is -timeout 0 for in-process ranks. Over tcp it is
// DefaultTimeout (30 s, as gloo). In-process ranks share this process's
// cores with each other's compute, so they wait longer before calling a
// peer stalled.
const DefaultInprocTimeout = 60 * time.Second

// TransportNames lists the -transport values, for help and messages.
func TransportNames() string { return strings.Join(transportNames, ", ") }

// TransportFlags are the transport flags the commands share.
type TransportFlags struct {
	Name    string        // -transport: Inproc or TCP
	Timeout time.Duration // -timeout: a send or receive without progress for this long fails; 0: the transport's default
	// WireProtection is -wire-protection (tcp only): auto, none, mac or aead; ""
	// takes RINGDDP_WIRE_PROTECTION, else tcp.DefaultWireProtection.
	WireProtection string
	// JoinTimeout is -join-timeout (RegisterJoinTimeout): how long the
	// launchers of several nodes wait for each other, and a rank to join
	// its job (Options.ConnectTimeout); 0: DefaultJoinTimeout.
	JoinTimeout time.Duration
	Flags       // -nnodes, -node-rank, -master, -insecure (tcp only)
}

// Register adds -transport, -timeout, -wire-protection, -nnodes,
// -node-rank, -master and -insecure to fs.
func (f *TransportFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Name, "transport", Inproc, "transport: "+TransportNames())
	fs.DurationVar(&f.Timeout, "timeout", 0, fmt.Sprintf("fail when a rank's send or receive makes no progress for this long (default %gs in process, %gs over tcp)",
		DefaultInprocTimeout.Seconds(), DefaultTimeout.Seconds()))
	fs.StringVar(&f.WireProtection, "wire-protection", "", fmt.Sprintf("with -transport tcp: what protects every frame after the handshake: "+
		"auto (mac on links between hosts, none on links within one), none, mac (header and payload authenticated, replay and reordering detected) or aead (also encrypted); default $%s, else %s; auto, mac and aead need the secret (with -insecure: none)",
		EnvWireProtection, tcp.DefaultWireProtection))
	f.Flags.Register(fs)
}

// RegisterJoinTimeout adds -join-timeout to fs (a command that offers
// it; see TransportFlags.JoinTimeout).
func (f *TransportFlags) RegisterJoinTimeout(fs *flag.FlagSet) {
	fs.DurationVar(&f.JoinTimeout, "join-timeout", DefaultJoinTimeout, "with -transport tcp: how long a rank waits to join its job and, with -nnodes, the nodes' launchers wait for each other (a waiting launcher says whom it waits for every 15s)")
}

// CheckName reports an unknown -transport.
func (f *TransportFlags) CheckName() error {
	for _, n := range transportNames {
		if f.Name == n {
			return nil
		}
	}
	return fmt.Errorf("-transport %q: unknown transport (valid: %s)", f.Name, TransportNames())
}

// Resolve checks the flags and works out this process's part. ranks is the
// -ranks value and given the flags set on the command line (flag.Visit).
// The multi-process flags apply to -transport tcp only. For tcp the
// process is one rank under a launcher's environment (getenv), whose world
// size -ranks must then agree with or be left out, and the launcher of
// -nnodes × -ranks ranks otherwise (Flags.Setup); Transport.Ranks is the
// world size, which replaces ranks.
func (f *TransportFlags) Resolve(ranks int, given map[string]bool, getenv func(string) string) (*Transport, error) {
	if err := f.CheckName(); err != nil {
		return nil, err
	}
	if f.Timeout < 0 {
		return nil, fmt.Errorf("-timeout %v: must not be negative", f.Timeout)
	}
	if f.JoinTimeout < 0 {
		return nil, fmt.Errorf("-join-timeout %v: must not be negative", f.JoinTimeout)
	}
	t := &Transport{Name: f.Name, Timeout: f.Timeout, JoinTimeout: f.JoinTimeout, Ranks: ranks}
	if f.Name == Shm && (given["wire-protection"] || f.MostNodes() > 1) {
		return nil, errors.New("-transport shm runs every rank on this host, without a wire: no -wire-protection, -nnodes 1 (use -transport tcp or auto across hosts)")
	}
	if !multiProcess(f.Name) {
		for _, name := range []string{"nnodes", "node-rank", "master", "insecure", "wire-protection", "join-timeout"} {
			if given[name] {
				return nil, fmt.Errorf("-%s applies to -transport tcp only", name)
			}
		}
		if t.Timeout == 0 {
			t.Timeout = DefaultInprocTimeout
		}
		return t, nil
	}
	s, err := f.Setup(ranks, given["ranks"], getenv)
	if err != nil {
		return nil, err
	}
	insecure, err := insecureEnv(getenv)
	if err != nil {
		return nil, err
	}
	if t.WireProtection, err = wireProtection(f.WireProtection, getenv, insecure || s.Insecure); err != nil {
		return nil, err
	}
	t.MP, t.Ranks = &s, s.WorldSize
	if t.Timeout == 0 {
		t.Timeout = DefaultTimeout
	}
	return t, nil
}

// Transport is a command's resolved transport.
type Transport struct {
	Name    string        // Inproc or TCP
	Timeout time.Duration // the no-progress timeout, defaults applied
	// JoinTimeout bounds joining the job (-join-timeout; 0: the default).
	JoinTimeout time.Duration
	Ranks       int // the world size
	// WireProtection is the tcp frames' protection (-wire-protection,
	// else RINGDDP_WIRE_PROTECTION), "" for the default. Ranks started by
	// the launcher get the same flag and environment.
	WireProtection tcp.WireProtection
	// MP is this process's part in a tcp job: its launcher or one rank.
	// Nil in process.
	MP *Setup
	// LocalSize, in process, simulates nodes of this many consecutive
	// ranks (inproc.WithLocalSize) for the topology-aware algorithms; 0:
	// no topology. Over tcp each rank's node comes from the rank's
	// environment (RINGDDP_NODE, else the host name).
	LocalSize int
}

// Launcher reports whether this process is a tcp job's launcher, which
// starts the ranks (Launch) instead of being one.
func (t *Transport) Launcher() bool { return t.MP != nil && t.MP.Launcher }

// HoldsRank0 reports whether this process holds rank 0 (or launches the
// process that does), so prints the command's report: in process always;
// over tcp the launcher, whose output is rank 0's, and rank 0 itself.
func (t *Transport) HoldsRank0() bool {
	return t.MP == nil || t.MP.Launcher || t.MP.Env.Rank == 0
}

// ShareCores gives this process its share of the host's cores when it is
// one of several tcp ranks on the host (see the function ShareCores) and
// returns GOMAXPROCS. Call it once, before connecting: it sets GOMAXPROCS
// for the whole process. It changes nothing in process or in the launcher.
func (t *Transport) ShareCores() int {
	if t.MP == nil || t.MP.Launcher {
		return runtime.GOMAXPROCS(0)
	}
	return ShareCores(t.MP.Env, os.Getenv)
}

// Bind pins this process, when it is one of several ranks on the host, to
// its share of the processors as RINGDDP_BIND says (see the function
// Bind), and returns the processors, nil when it left the process alone.
// Call it once, early, after ShareCores. In process and in the launcher
// it does nothing.
func (t *Transport) Bind() ([]int, error) {
	if t.MP == nil || t.MP.Launcher {
		return nil, nil
	}
	return Bind(t.MP.Env, os.Getenv)
}

// Connect returns this process's endpoints of a world of ranks ranks: all
// of them in process (a fresh in-process world), this process's rank over
// tcp (Connect), where ranks must be the job's world size. Callers name
// the transport in its errors ("-transport tcp: ...").
func (t *Transport) Connect(ctx context.Context, ranks int) ([]transport.Conn, error) {
	switch {
	case t.MP == nil:
		w, err := inproc.NewWorld(ranks, inproc.WithTimeout(t.Timeout), inproc.WithLocalSize(t.LocalSize))
		if err != nil {
			return nil, err
		}
		conns := make([]transport.Conn, ranks)
		for r := range conns {
			conns[r] = w.Conn(r)
		}
		return conns, nil
	case t.MP.Launcher:
		return nil, errors.New("this process is not a rank (no RANK/WORLD_SIZE or other launcher variables)")
	case ranks != t.MP.Env.WorldSize:
		return nil, fmt.Errorf("%d ranks asked for, the launcher's world has %d", ranks, t.MP.Env.WorldSize)
	}
	env := t.MP.Env
	conn, _, err := Connect(ctx, Options{Timeout: t.Timeout, ConnectTimeout: t.JoinTimeout, Insecure: t.MP.Insecure, WireProtection: t.WireProtection, Env: &env, Transport: t.Name})
	if err != nil {
		return nil, err
	}
	return []transport.Conn{conn}, nil
}

// Survivor is this rank's Survivor when its launcher runs the job with
// survivors continuing after a failure (EnvOnFailure=continue), nil
// otherwise: it connects to the store the launcher hosts.
func (t *Transport) Survivor(ctx context.Context) (*Survivor, error) {
	if t.MP == nil || t.MP.Launcher || !SurviveEnv(os.Getenv) {
		return nil, nil
	}
	env := t.MP.Env
	return NewSurvivor(ctx, Options{Timeout: t.Timeout, ConnectTimeout: t.JoinTimeout, Insecure: t.MP.Insecure,
		WireProtection: t.WireProtection, Env: &env, Transport: t.Name})
}

// RankCommand says what each rank of a tcp job runs, given the command's
// arguments: a program, its arguments and extra environment (KEY=VALUE).
type RankCommand func(args []string) (path string, argv, env []string, err error)

// ThisProgram is the RankCommand of a real job: this program with the same
// arguments. (Commands' tests run the test binary instead; see selftest.)
func ThisProgram(args []string) (path string, argv, env []string, err error) {
	path, err = os.Executable()
	return path, args, nil, err
}

// Launch is the launcher of a tcp job (Launcher reports true): it starts
// this host's ranks as processes running ranks(args) and waits for them
// (Run). Rank 0's stdout, the job's report, goes to stdout as it is; the
// other ranks' lines come prefixed with "[rank r] ", stderr to os.Stderr.
// Ctrl-C and SIGTERM are forwarded to the ranks, which can stop cleanly,
// so ctx's cancellation is not used.
func (t *Transport) Launch(ctx context.Context, args []string, ranks RankCommand, stdout io.Writer) error {
	if !t.Launcher() {
		return errors.New("-transport " + t.Name + ": this process is not a job's launcher")
	}
	path, argv, env, err := ranks(args)
	if err != nil {
		return fmt.Errorf("-transport tcp: %w", err)
	}
	return Run(context.WithoutCancel(ctx), Config{
		Ranks: t.MP.LocalRanks, Nnodes: t.MP.Nnodes, MaxNodes: t.MP.MaxNodes, NodeRank: t.MP.NodeRank,
		Master: t.MP.Master, Insecure: t.MP.Insecure, JoinTimeout: t.JoinTimeout,
		Path: path, Args: argv, Env: env,
		Stdout: stdout, Stderr: os.Stderr,
	})
}
