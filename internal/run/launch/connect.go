package launch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// EnvWireProtection is tcp.Config.WireProtection: auto, none, mac or aead
// (-wire-protection takes precedence; default tcp.DefaultWireProtection,
// auto; none under the insecure opt-out).
const EnvWireProtection = "RINGDDP_WIRE_PROTECTION"

// EnvTCPCongestion is tcp.Config.Congestion: unset or "" for the default
// (reno on connections within a host; the host's default between hosts), "system" to leave every connection's, or an algorithm
// set on every connection ("bbr", "reno", ...).
const EnvTCPCongestion = "RINGDDP_TCP_CONGESTION"

// wireProtection resolves the wire protection: the flag's value, else
// EnvWireProtection, else "" (tcp.DefaultWireProtection; none for an
// insecure job). mac and aead need the secret, so are refused with
// insecure.
func wireProtection(flag string, getenv func(string) string, insecure bool) (tcp.WireProtection, error) {
	what, v := "-wire-protection", flag
	if v == "" {
		what, v = EnvWireProtection, getenv(EnvWireProtection)
	}
	m, err := tcp.ParseWireProtection(v)
	if err != nil {
		return "", fmt.Errorf("%s %q: unknown mode (valid: %s)", what, v, tcp.WireProtectionNames())
	}
	if insecure && m != "" && m != tcp.WireNone {
		return "", fmt.Errorf("%s %s needs the job's secret, which the insecure opt-out (%s=1 or -insecure) runs without: use none, or drop the opt-out", what, m, EnvInsecure)
	}
	return m, nil
}

// Defaults of Options.
const (
	DefaultTimeout        = tcp.DefaultTimeout        // 30 s, as gloo
	DefaultConnectTimeout = tcp.DefaultConnectTimeout // 5 min
)

// Options configure Connect. The zero value reads everything from the
// environment.
type Options struct {
	// Timeout fails a collective's send or receive that sees no progress
	// for this long (a stalled or unreachable peer). Default 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds joining the job: reaching the store, every
	// rank publishing its address, and the mesh's handshakes. Default
	// 5 min.
	ConnectTimeout time.Duration
	// Insecure runs without a secret, as RINGDDP_INSECURE=1 does.
	Insecure bool
	// WireProtection protects the frames after the handshake
	// (tcp.Config.WireProtection); "" reads RINGDDP_WIRE_PROTECTION, else
	// tcp.DefaultWireProtection.
	WireProtection tcp.WireProtection
	// RunID overrides the run id (default: RunID(Getenv)).
	RunID string
	// Transport is TCP (or "", the default), Shm (every rank on this
	// host, over shared memory) or Auto: shm when the ranks find that they
	// all share this host's kernel and network namespace (and
	// RINGDDP_NODE, when set), tcp when no two do, else shm among each
	// host's ranks and tcp between hosts (package mixed).
	Transport string
	// Env is this rank; nil reads it with rendezvous.FromEnv(Getenv).
	Env *rendezvous.Env
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
	// Warnings receives the warning every rank prints when it runs
	// without a secret (default os.Stderr).
	Warnings io.Writer
}

// insecureWarning is what every rank says when it runs without a secret.
const insecureWarning = "ringddp: WARNING: rank %d runs WITHOUT a secret (-insecure / RINGDDP_INSECURE=1): " +
	"anyone who can reach this job's ports can join it and read or change what it sends; use it only on a network you trust\n"

// Conn is one rank's endpoint of a multi-process job: a *tcp.Conn, a
// *shm.Conn or a *mixed.Conn (Options.Transport; its methods, Exchange and Abort included,
// are promoted, so the allreduce package uses the fused ring step and
// tells peers on failure) that also owns the job's store client — on
// rank 0, the store server itself — and closes it with the endpoint.
type Conn struct {
	Endpoint
	store     *rendezvous.TCPStore
	storeOnce sync.Once
}

// Endpoint is what a multi-process transport's endpoint offers: *tcp.Conn,
// *shm.Conn and *mixed.Conn.
type Endpoint interface {
	transport.Conn
	transport.Exchanger
	transport.Aborter
	NodeName() string
	LocalRank() int
	LocalSize() int
	// The stall notices (allreduce's stallNotifier), promoted so that a
	// rank that gives up names the rank at the end of the waits.
	NoteStall(s transport.Stall)
	PeerStall(rank int) (transport.Stall, bool)
}

// WireProtection is the tcp endpoint's frame protection (a mixed
// endpoint's between hosts); over shm, which has no wire, tcp.WireNone.
func (c *Conn) WireProtection() tcp.WireProtection {
	var e transport.Conn = c.Endpoint
	if mc, ok := e.(*mixed.Conn); ok {
		e = mc.World()
	}
	if tc, ok := e.(*tcp.Conn); ok {
		return tc.WireProtection()
	}
	return tcp.WireNone
}

// LocalEndpointMembers is a mixed endpoint's (package allreduce pipelines
// over its two endpoints); nil for the others.
func (c *Conn) LocalEndpointMembers() []int {
	if mc, ok := c.Endpoint.(*mixed.Conn); ok {
		return mc.LocalEndpointMembers()
	}
	return nil
}

// Close closes the endpoint (peers see this rank leave), then the store.
func (c *Conn) Close() error {
	err := c.Endpoint.Close()
	c.closeStore()
	return err
}

// Abort fails the endpoint with cause (peers get it in their errors), then
// closes the store.
func (c *Conn) Abort(cause error) {
	c.Endpoint.Abort(cause)
	c.closeStore()
}

func (c *Conn) closeStore() {
	c.storeOnce.Do(func() {
		if c.store != nil {
			_ = c.store.Close()
		}
	})
}

var _ transport.Conn = (*Conn)(nil)
var _ transport.Aborter = (*Conn)(nil)
var _ transport.Exchanger = (*Conn)(nil)

// Connect joins this process's job as the rank its environment names (see
// rendezvous.FromEnv): it connects the job's store — rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT — and dials the TCP mesh, authenticated with
// RINGDDP_SECRET. Without launcher variables it is rank 0 of a job of one.
//
// Reading the environment (Options.Getenv nil), Connect removes
// RINGDDP_SECRET from it once read (os.Unsetenv), so that the processes
// the rank starts do not inherit the secret.
//
// Connect leaves GOMAXPROCS alone: a rank started by another launcher
// than ringddp's calls ShareCores first to take its share of the cores.
//
// The returned endpoint is a *Conn; closing it (the allreduce.Group that
// owns it does) also closes the store, so rank 0 keeps serving the store
// for as long as its endpoint is open.
func Connect(ctx context.Context, opts Options) (transport.Conn, rendezvous.Env, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var env rendezvous.Env
	if opts.Env != nil {
		env = *opts.Env
	} else {
		var err error
		if env, err = rendezvous.FromEnv(getenv); err != nil {
			return nil, env, err
		}
	}
	if opts.Getenv == nil {
		// The secret lives on in env.Secret: nothing this rank starts
		// (a shell, a profiler, a data loader) inherits it.
		_ = os.Unsetenv(EnvSecret)
	}
	rs, err := resolveRank(opts, getenv, env)
	if err != nil {
		return nil, env, err
	}
	var store *rendezvous.TCPStore
	if env.WorldSize > 1 {
		if store, err = connectStore(ctx, env, getenv, rs.storeConfig(env)); err != nil {
			return nil, env, fmt.Errorf("launch: rank %d of %d: %w", env.Rank, env.WorldSize, err)
		}
	}
	var cfgStore rendezvous.Store
	if store != nil {
		cfgStore = store
	}
	cfg := rs.tcpConfig(env, cfgStore, rs.runID, opts.Warnings)
	runID := rs.runID
	var c Endpoint
	kind, hosts, err := chooseTransport(ctx, opts.Transport, store, env, runID)
	if note := unknownHosts(hosts); err == nil && note != "" && env.Rank == 0 {
		w := opts.Warnings
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprint(w, note)
	}
	if err == nil {
		c, err = dialEndpoint(ctx, kind, cfg, hosts)
	}
	if err != nil {
		if store != nil {
			_ = store.Close()
		}
		return nil, env, fmt.Errorf("launch: %w", err)
	}
	return &Conn{Endpoint: c, store: store}, env, nil
}

// rankSettings are a rank's transport settings, resolved from Options and
// the environment: what Connect and a Survivor's generations dial with.
type rankSettings struct {
	insecure                bool
	spin                    time.Duration
	wire                    tcp.WireProtection
	timeout, connectTimeout time.Duration
	runID, congestion       string
}

// resolveRank checks and resolves the settings of rank env.
func resolveRank(opts Options, getenv func(string) string, env rendezvous.Env) (rankSettings, error) {
	var rs rankSettings
	insecure, err := insecureEnv(getenv)
	if err != nil {
		return rs, err
	}
	rs.insecure = insecure || opts.Insecure
	if rs.spin, err = spinEnv(getenv); err != nil {
		return rs, err
	}
	if rs.wire, err = wireProtection(string(opts.WireProtection), getenv, rs.insecure); err != nil {
		return rs, fmt.Errorf("launch: rank %d: %w", env.Rank, err)
	}
	switch {
	case rs.insecure && len(env.Secret) > 0:
		return rs, fmt.Errorf("launch: rank %d: %s and the insecure opt-out (%s=1 or -insecure) are both set: drop one", env.Rank, EnvSecret, EnvInsecure)
	case !rs.insecure && len(env.Secret) == 0 && env.WorldSize > 1:
		return rs, fmt.Errorf("launch: rank %d of %d: %s is not set: every rank needs the job's shared secret (the same on every rank; "+
			"the ringddp launcher makes one), or the explicit opt-out %s=1 (-insecure) on a trusted network", env.Rank, env.WorldSize, EnvSecret, EnvInsecure)
	}
	rs.runID = cmp.Or(opts.RunID, RunID(getenv))
	rs.connectTimeout = cmp.Or(max(opts.ConnectTimeout, 0), DefaultConnectTimeout)
	rs.timeout = cmp.Or(max(opts.Timeout, 0), DefaultTimeout)
	rs.congestion = getenv(EnvTCPCongestion)
	return rs, nil
}

// storeConfig is how rank env reaches the job's store.
func (rs rankSettings) storeConfig(env rendezvous.Env) rendezvous.StoreConfig {
	return rendezvous.StoreConfig{Secret: env.Secret, Insecure: rs.insecure, Timeout: rs.connectTimeout}
}

// tcpConfig is the tcp configuration of rank env under run id runID,
// rendezvousing through store (nil: a job of one). An insecure rank says
// so on warnings (default os.Stderr).
func (rs rankSettings) tcpConfig(env rendezvous.Env, store rendezvous.Store, runID string, warnings io.Writer) tcp.Config {
	cfg := tcp.ConfigFromEnv(env, store)
	cfg.RunID = runID
	cfg.Timeout = rs.timeout
	cfg.ConnectTimeout = rs.connectTimeout
	cfg.Insecure = rs.insecure
	if rs.insecure {
		cfg.Secret = nil
		fmt.Fprintf(cmp.Or[io.Writer](warnings, os.Stderr), insecureWarning, env.Rank)
	}
	cfg.Spin = rs.spin
	cfg.WireProtection = rs.wire
	cfg.Congestion = rs.congestion
	return cfg
}

// connectStore connects this rank to the job's store, which rank 0 hosts:
// on the socket its launcher bound and handed over (EnvStoreFD), if any.
func connectStore(ctx context.Context, env rendezvous.Env, getenv func(string) string, scfg rendezvous.StoreConfig) (*rendezvous.TCPStore, error) {
	ln, err := storeListener(getenv)
	if err != nil {
		return nil, err
	}
	if ln != nil {
		return rendezvous.ConnectListener(ctx, env, ln, scfg)
	}
	return rendezvous.Connect(ctx, env, "", scfg)
}

// ShareCores sets GOMAXPROCS to this rank's share of the host's cores,
// GOMAXPROCS / env.LocalWorldSize (at least 1), when env says that several
// ranks run on this host and the GOMAXPROCS variable (read with getenv) is
// not set, and returns GOMAXPROCS. The ringddp launcher sets GOMAXPROCS for
// its ranks itself; under mpirun, srun or torchrun, ranks that each
// schedule goroutines on every core slow each other down, small messages
// most (docs/multiprocess.md). It sets GOMAXPROCS for the whole process:
// call it once, early, in a process that is one rank.
func ShareCores(env rendezvous.Env, getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" || env.LocalWorldSize < 2 {
		return runtime.GOMAXPROCS(0)
	}
	n := coreShare(env.LocalWorldSize)
	runtime.GOMAXPROCS(n)
	return n
}

// coreShare is one rank's share of this process's processors when ranks
// of a host share them: GOMAXPROCS / ranks, at least 1.
func coreShare(ranks int) int { return max(1, runtime.GOMAXPROCS(0)/ranks) }

// PeerMemory is the endpoint's transport.PeerMemory (shm lends copies of
// small buffers for the direct algorithms), or nil (tcp, mixed): the
// allreduce package finds it here (allreduce.PeerMemoryOf).
func (c *Conn) PeerMemory() transport.PeerMemory {
	if pm, ok := c.Endpoint.(transport.PeerMemory); ok {
		return pm
	}
	return nil
}
