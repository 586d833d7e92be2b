package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// DefaultMasterPort is MASTER_PORT when unset (torchrun's default).
const DefaultMasterPort = 29500

// Env is where this process stands in its job, as its launcher told it.
type Env struct {
	Rank      int // this process's rank, 0..WorldSize-1
	WorldSize int // number of ranks
	// LocalRank and LocalWorldSize place the rank on its host.
	// LocalWorldSize is 0 when the launcher did not say (a transport may
	// then work it out from the ranks' addresses).
	LocalRank      int
	LocalWorldSize int
	MasterAddr     string // host of rank 0's store (MASTER_ADDR), without brackets
	MasterPort     int    // port of rank 0's store (MASTER_PORT, default 29500)
	Secret         []byte // RINGDDP_SECRET: the job's shared secret
	// Node is RINGDDP_NODE: this rank's node name for topology-aware
	// algorithms, when set (to simulate several nodes on one host);
	// otherwise the transport uses the host name.
	Node string
	// Found reports whether a launcher set a rank; without one the Env is
	// a single rank (0 of 1).
	Found bool
	// Launcher names where the rank came from: "torchrun", "openmpi",
	// "slurm", or "" when not Found.
	Launcher string
}

// MasterHostPort is MasterAddr:MasterPort, bracketed for IPv6.
func (e Env) MasterHostPort() string {
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort))
}

// launcher describes one launcher's variables.
type launcher struct {
	name                 string
	rank, size           string
	localRank, localSize string
	extraLocalSize       func(getenv func(string) string) (int, bool, error)
}

var launchers = []launcher{
	{name: "torchrun", rank: "RANK", size: "WORLD_SIZE", localRank: "LOCAL_RANK", localSize: "LOCAL_WORLD_SIZE"},
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS", localRank: "SLURM_LOCALID",
		localSize: "SLURM_NTASKS_PER_NODE", extraLocalSize: slurmTasksOnNode},
}

// FromEnv reads the job's layout from environment variables (pass
// os.Getenv). The launchers' conventions are tried in order, and the first
// that sets a rank or a size wins:
//
//	torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//	OpenMPI:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//	          OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//	Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//	          SLURM_NTASKS_PER_NODE (else SLURM_TASKS_PER_NODE at SLURM_NODEID)
//
// MASTER_ADDR and MASTER_PORT (default 29500) locate rank 0's store under
// every launcher; MASTER_ADDR is required when there is more than one rank.
// RINGDDP_SECRET is the shared secret. With no launcher variables the Env
// is rank 0 of 1 with Found false. Malformed or inconsistent values are
// errors naming the variable.
func FromEnv(getenv func(string) string) (Env, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	e := Env{WorldSize: 1, LocalWorldSize: 1, Secret: []byte(getenv("RINGDDP_SECRET")), Node: get("RINGDDP_NODE")}
	for _, l := range launchers {
		rs, ss := get(l.rank), get(l.size)
		if rs == "" && ss == "" {
			continue
		}
		if rs == "" {
			return Env{}, fmt.Errorf("rendezvous: %s is set but %s is not (%s launch)", l.size, l.rank, l.name)
		}
		if ss == "" {
			return Env{}, fmt.Errorf("rendezvous: %s is set but %s is not (%s launch)", l.rank, l.size, l.name)
		}
		var err error
		if e.Rank, err = envInt(l.rank, rs, 0); err != nil {
			return Env{}, err
		}
		if e.WorldSize, err = envInt(l.size, ss, 1); err != nil {
			return Env{}, err
		}
		if e.Rank >= e.WorldSize {
			return Env{}, fmt.Errorf("rendezvous: %s=%d is out of range for %s=%d (ranks are 0..%d)", l.rank, e.Rank, l.size, e.WorldSize, e.WorldSize-1)
		}
		e.Found, e.Launcher = true, l.name
		e.LocalRank, e.LocalWorldSize = 0, 0
		if s := get(l.localRank); s != "" {
			if e.LocalRank, err = envInt(l.localRank, s, 0); err != nil {
				return Env{}, err
			}
		}
		if s := get(l.localSize); s != "" {
			if e.LocalWorldSize, err = envInt(l.localSize, s, 1); err != nil {
				return Env{}, err
			}
		} else if l.extraLocalSize != nil {
			n, ok, err := l.extraLocalSize(get)
			if err != nil {
				return Env{}, err
			}
			if ok {
				e.LocalWorldSize = n
			}
		}
		if e.WorldSize == 1 && e.LocalWorldSize == 0 {
			e.LocalWorldSize = 1
		}
		if e.LocalWorldSize > e.WorldSize {
			return Env{}, fmt.Errorf("rendezvous: %d ranks on this host (%s) but only %d in the job (%s)", e.LocalWorldSize, l.localSize, e.WorldSize, l.size)
		}
		if e.LocalWorldSize > 0 && e.LocalRank >= e.LocalWorldSize {
			return Env{}, fmt.Errorf("rendezvous: local rank %d (%s) is out of range for %d ranks on this host", e.LocalRank, l.localRank, e.LocalWorldSize)
		}
		break
	}
	e.MasterAddr = get("MASTER_ADDR")
	if strings.HasPrefix(e.MasterAddr, "[") && strings.HasSuffix(e.MasterAddr, "]") {
		e.MasterAddr = e.MasterAddr[1 : len(e.MasterAddr)-1]
	}
	if strings.ContainsAny(e.MasterAddr, " \t/[]") || (strings.Contains(e.MasterAddr, ":") && net.ParseIP(e.MasterAddr) == nil) {
		return Env{}, fmt.Errorf("rendezvous: MASTER_ADDR=%q is not a host name or IP address (give the port in MASTER_PORT)", e.MasterAddr)
	}
	if e.MasterAddr == "" && e.WorldSize > 1 {
		return Env{}, fmt.Errorf("rendezvous: MASTER_ADDR is not set: %d ranks (from %s) need the address of rank 0's host", e.WorldSize, e.Launcher)
	}
	e.MasterPort = DefaultMasterPort
	if s := get("MASTER_PORT"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return Env{}, fmt.Errorf("rendezvous: MASTER_PORT=%q is not a port number (1..65535)", s)
		}
		e.MasterPort = p
	}
	return e, nil
}

func envInt(name, s string, least int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("rendezvous: %s=%q is not a whole number", name, s)
	}
	if v < least {
		return 0, fmt.Errorf("rendezvous: %s=%d is out of range (want at least %d)", name, v, least)
	}
	return v, nil
}

// slurmTasksOnNode reads this node's task count from SLURM_TASKS_PER_NODE
// ("2(x3),1": 2 tasks on each of 3 nodes, then 1) at SLURM_NODEID.
func slurmTasksOnNode(get func(string) string) (int, bool, error) {
	spec, ids := get("SLURM_TASKS_PER_NODE"), get("SLURM_NODEID")
	if spec == "" || ids == "" {
		return 0, false, nil
	}
	node, err := envInt("SLURM_NODEID", ids, 0)
	if err != nil {
		return 0, false, err
	}
	bad := fmt.Errorf("rendezvous: SLURM_TASKS_PER_NODE=%q is malformed (want e.g. \"2(x3),1\")", spec)
	for _, part := range strings.Split(spec, ",") {
		tasks, reps := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 {
			if !strings.HasSuffix(part, ")") {
				return 0, false, bad
			}
			tasks, reps = part[:i], part[i+2:len(part)-1]
		}
		t, err1 := strconv.Atoi(tasks)
		r, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || t < 1 || r < 1 {
			return 0, false, bad
		}
		if node < r {
			return t, true, nil
		}
		node -= r
	}
	return 0, false, fmt.Errorf("rendezvous: SLURM_NODEID=%s is beyond the nodes of SLURM_TASKS_PER_NODE=%q", ids, spec)
}

// Connect returns this rank's client of the job's TCP store. On rank 0 it
// first starts the server, listening on listen or, when listen is "", on
// env.MasterHostPort() — or on every interface at MasterPort if this host
// does not hold MasterAddr (a Kubernetes service name, say); closing that
// client stops the server, so rank 0 must keep it open while other ranks
// may still use the store. Other ranks retry until the server is up, until
// ctx ends or cfg.Timeout passes. cfg.Secret defaults to env.Secret.
//
// A single-rank Env without MASTER_ADDR gets a private server on a free
// loopback port.
func Connect(ctx context.Context, env Env, listen string, cfg StoreConfig) (*TCPStore, error) {
	if len(cfg.Secret) == 0 {
		cfg.Secret = env.Secret
	}
	if env.WorldSize < 1 || env.Rank < 0 || env.Rank >= env.WorldSize {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrInvalid, env.Rank, env.WorldSize)
	}
	addr := env.MasterHostPort()
	if env.MasterAddr == "" {
		if env.WorldSize > 1 {
			return nil, fmt.Errorf("%w: no master address for %d ranks", ErrInvalid, env.WorldSize)
		}
		addr = "127.0.0.1:0"
	}
	if env.Rank != 0 {
		return DialStore(ctx, addr, cfg)
	}
	var srv *StoreServer
	var err error
	if listen != "" {
		srv, err = ListenStore(listen, cfg)
	} else {
		srv, err = ListenStore(addr, cfg)
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			// MASTER_ADDR names this host through an address it does not
			// hold (a Kubernetes service, a NAT): listen on every interface,
			// as PyTorch's TCPStore does.
			srv, err = ListenStore(net.JoinHostPort("", strconv.Itoa(env.MasterPort)), cfg)
		}
	}
	if err != nil {
		return nil, err
	}
	if env.MasterAddr == "" {
		addr = srv.Addr().String()
	}
	c, err := DialStore(ctx, addr, cfg)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	c.server = srv
	return c, nil
}

// ConnectListener is Connect for rank 0 whose store socket is already
// bound and listening (a launcher bound it and handed it over, so that no
// other process could take the port in between): the store is served on
// ln, and closing the returned client stops it.
func ConnectListener(ctx context.Context, env Env, ln net.Listener, cfg StoreConfig) (*TCPStore, error) {
	if len(cfg.Secret) == 0 {
		cfg.Secret = env.Secret
	}
	if env.Rank != 0 {
		_ = ln.Close()
		return nil, fmt.Errorf("%w: rank %d was handed the store's socket; only rank 0 serves the store", ErrInvalid, env.Rank)
	}
	srv, err := ServeStore(ln, cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	c, err := DialStore(ctx, srv.Addr().String(), cfg)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	c.server = srv
	return c, nil
}
