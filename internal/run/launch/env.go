package launch

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Environment variables this package reads and sets, besides the
// launchers' (see rendezvous.FromEnv).
const (
	EnvSecret   = "RINGDDP_SECRET"   // the job's shared secret
	EnvInsecure = "RINGDDP_INSECURE" // "1": run without a secret (explicit opt-out)
	EnvRunID    = "RINGDDP_RUN_ID"   // the run id (namespaces the store's keys)
	// EnvSpin is tcp.Config.Spin as a Go duration ("2ms", "500us"); "off"
	// or a negative duration never polls.
	EnvSpin = "RINGDDP_TCP_SPIN"
	// EnvStoreFD is set by the launcher for rank 0 only: the number of an
	// inherited descriptor holding the store's bound, listening socket.
	EnvStoreFD = "RINGDDP_STORE_FD"
)

// DefaultRunID is the run id when no variable names one.
const DefaultRunID = "default"

// Detect reads the launcher variables. isRank reports whether a launcher
// set a rank, in which case this process is env's rank; otherwise a command
// asked for a multi-process transport is the launcher.
func Detect(getenv func(string) string) (env rendezvous.Env, isRank bool, err error) {
	env, err = rendezvous.FromEnv(getenv)
	if err != nil {
		return rendezvous.Env{}, false, err
	}
	return env, env.Found, nil
}

// RunID is the run id from the environment: RINGDDP_RUN_ID, else
// TORCHELASTIC_RUN_ID, else SLURM_JOB_ID, else DefaultRunID.
func RunID(getenv func(string) string) string {
	for _, k := range []string{EnvRunID, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return DefaultRunID
}

// insecureEnv reports whether RINGDDP_INSECURE asks to run without a secret.
func insecureEnv(getenv func(string) string) (bool, error) {
	v := strings.TrimSpace(getenv(EnvInsecure))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 (or true) to run without a secret, 0 or unset otherwise", EnvInsecure, v)
	}
	return b, nil
}

// sizeVar names the world-size variable of a launcher, for messages.
func sizeVar(launcher string) string {
	switch launcher {
	case "openmpi":
		return "OMPI_COMM_WORLD_SIZE"
	case "slurm":
		return "SLURM_NTASKS"
	}
	return "WORLD_SIZE"
}

// Flags are the multi-process flags the commands share. Register adds
// them to a flag set; Setup resolves them against -ranks and the
// environment.
type Flags struct {
	Nnodes   int    // -nnodes: number of hosts (one launcher each); with -nnodes MIN:MAX, MIN: the hosts the job starts with
	MaxNodes int    // -nnodes MIN:MAX: the most hosts the job may grow to (0 or Nnodes: it does not grow; nodes_scaleup.go)
	NodeRank int    // -node-rank: this host's index, 0..MostNodes()-1
	Master   string // -master: host:port of rank 0's store (required with -nnodes > 1)
	Insecure bool   // -insecure: run without a secret
}

// Register adds -nnodes, -node-rank, -master and -insecure to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.Nnodes = 1
	fs.Var(nodesValue{f}, "nnodes", "with -transport tcp: number of hosts, each running one launcher with -ranks ranks (world size = nnodes × ranks); "+
		"MIN:MAX starts the job on nodes 0..MIN-1 and lets nodes MIN..MAX-1 join it while it runs (scale up; needs -on-failure continue -heal)")
	fs.IntVar(&f.NodeRank, "node-rank", 0, "with -transport tcp and -nnodes > 1: this host's index, 0..nnodes-1 (node k runs global ranks k·ranks … k·ranks+ranks-1)")
	fs.StringVar(&f.Master, "master", "", "with -transport tcp: host:port of rank 0's rendezvous store (node 0 hosts it; required with -nnodes > 1; default 127.0.0.1 and a free port)")
	fs.BoolVar(&f.Insecure, "insecure", false, "with -transport tcp: run without the shared secret (RINGDDP_SECRET): anyone who can reach the ports can join; trusted networks only")
}

// Setup is a command's part in a multi-process job.
type Setup struct {
	// Launcher: this process starts the ranks (Run) instead of being one.
	Launcher bool
	// Env is this process's rank (when !Launcher).
	Env rendezvous.Env
	// WorldSize is the number of ranks in the job.
	WorldSize int
	// LocalRanks is the number of ranks the launcher starts on this host.
	LocalRanks int
	Flags
}

// Setup works out how this process takes part in a -transport tcp job.
// ranks is the -ranks value (ranks per host) and ranksGiven whether it was
// set explicitly (on the command line, say), as opposed to a default.
//
// Under a launcher (Detect) the process is one rank and the world size is
// the launcher's; -ranks (times -nnodes) must then agree with it or be
// left at its default. Otherwise the process is the launcher of
// -nnodes × -ranks ranks, and the flags are checked: -node-rank in range,
// -master a host:port (required with more than one node), and
// RINGDDP_SECRET set when there is more than one node, unless -insecure.
func (f Flags) Setup(ranks int, ranksGiven bool, getenv func(string) string) (Setup, error) {
	s := Setup{Flags: f}
	if f.Nnodes < 1 {
		return s, fmt.Errorf("-nnodes %d: need at least 1", f.Nnodes)
	}
	if ranks < 1 {
		return s, fmt.Errorf("-ranks %d: need at least 1", ranks)
	}
	env, isRank, err := Detect(getenv)
	if err != nil {
		return s, err
	}
	if isRank {
		if ranksGiven && !f.worldFits(ranks, env.WorldSize) {
			what := fmt.Sprintf("-ranks %d", ranks)
			if f.Nnodes > 1 {
				what = fmt.Sprintf("-nnodes %d × -ranks %d = %d", f.Nnodes, ranks, f.Nnodes*ranks)
			}
			return s, fmt.Errorf("%s disagrees with the launcher's world size %s=%d (%s-style environment): under a launcher, leave -ranks out or make it agree",
				what, sizeVar(env.Launcher), env.WorldSize, env.Launcher)
		}
		s.Env, s.WorldSize, s.LocalRanks = env, env.WorldSize, env.LocalWorldSize
		return s, nil
	}
	s.Launcher, s.WorldSize, s.LocalRanks = true, f.Nnodes*ranks, ranks
	if f.NodeRank < 0 || f.NodeRank >= f.MostNodes() {
		return s, fmt.Errorf("-node-rank %d: out of range for -nnodes %s (valid: 0..%d)", f.NodeRank, f.nodesText(), f.MostNodes()-1)
	}
	if f.Master != "" {
		if _, _, err := splitMaster(f.Master); err != nil {
			return s, err
		}
	} else if f.MostNodes() > 1 {
		return s, fmt.Errorf("-nnodes %s needs -master host:port: the address of node 0, where rank 0 hosts the rendezvous store", f.nodesText())
	}
	if f.MostNodes() > 1 && !f.Insecure && getenv(EnvSecret) == "" {
		return s, errNoSharedSecret
	}
	if f.Insecure && getenv(EnvSecret) != "" {
		return s, fmt.Errorf("-insecure and %s are both set: drop one", EnvSecret)
	}
	return s, nil
}

var errNoSharedSecret = errors.New("-nnodes > 1 needs the job's shared secret in RINGDDP_SECRET, the same on every node " +
	"(e.g. export RINGDDP_SECRET=$(openssl rand -hex 32) and copy it to the other nodes), or -insecure on a trusted network")

// splitMaster parses -master host:port.
func splitMaster(s string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(s)
	if err == nil && h != "" {
		port, err = strconv.Atoi(p)
		if err == nil && port >= 1 && port <= 65535 {
			return h, port, nil
		}
	}
	return "", 0, fmt.Errorf("-master %q: want host:port (a port 1..65535), e.g. node0.example:29500 or 10.0.0.1:29500", s)
}

// spinEnv reads EnvSpin: the tcp transport's polling budget (0: its
// default).
func spinEnv(getenv func(string) string) (time.Duration, error) {
	v := getenv(EnvSpin)
	switch v {
	case "":
		return 0, nil
	case "off":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q: want a duration such as 2ms, or off", EnvSpin, v)
	}
	if d == 0 {
		d = -1
	}
	return d, nil
}

// storeListener is the store socket the launcher bound for rank 0 and
// handed over as an inherited descriptor (EnvStoreFD), or nil when none
// was.
func storeListener(getenv func(string) string) (net.Listener, error) {
	v := strings.TrimSpace(getenv(EnvStoreFD))
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want the number of an inherited descriptor (3 or more)", EnvStoreFD, v)
	}
	f := os.NewFile(uintptr(fd), "ringddp-store")
	if f == nil {
		return nil, fmt.Errorf("%s=%d: no such descriptor", EnvStoreFD, fd)
	}
	defer f.Close() // FileListener holds a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: not a listening socket: %w", EnvStoreFD, fd, err)
	}
	return ln, nil
}
