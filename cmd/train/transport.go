package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/launch"
)

// connectFunc returns this process's endpoints of a world of ranks ranks
// (every rank for in-process transports; this process's rank for tcp, the
// world size coming from the launcher).
type connectFunc func(ctx context.Context, ranks int) ([]transport.Conn, error)

// commTimeout is how long an in-process rank waits for a peer without
// progress; over tcp the default is launch.DefaultTimeout (30 s, as gloo).
const commTimeout = 60 * time.Second

// transportOptions are the flags a transport uses.
type transportOptions struct {
	timeout time.Duration // -timeout; 0: the transport's default
	// mp is this process's part in a -transport tcp job (nil otherwise).
	mp *launch.Setup
}

// transports are the -transport values.
var transports = map[string]func(transportOptions) connectFunc{
	"inproc": func(o transportOptions) connectFunc {
		timeout := commTimeout
		if o.timeout > 0 {
			timeout = o.timeout
		}
		return func(_ context.Context, ranks int) ([]transport.Conn, error) {
			w, err := inproc.NewWorld(ranks, inproc.WithTimeout(timeout))
			if err != nil {
				return nil, err
			}
			conns := make([]transport.Conn, ranks)
			for r := range conns {
				conns[r] = w.Conn(r)
			}
			return conns, nil
		}
	},
	// tcp: one rank per process. Without a launcher's environment the
	// process is the launcher instead (run calls launchRanks) and never
	// connects.
	"tcp": func(o transportOptions) connectFunc {
		return func(ctx context.Context, ranks int) ([]transport.Conn, error) {
			if o.mp == nil || o.mp.Launcher {
				return nil, fmt.Errorf("-transport tcp: this process is not a rank (no RANK/WORLD_SIZE or other launcher variables)")
			}
			env := o.mp.Env
			if ranks != env.WorldSize {
				return nil, fmt.Errorf("-transport tcp: %d ranks asked for, the launcher's world has %d", ranks, env.WorldSize)
			}
			conn, _, err := launch.Connect(ctx, launch.Options{Timeout: o.timeout, Insecure: o.mp.Insecure, Env: &env})
			if err != nil {
				return nil, err
			}
			return []transport.Conn{conn}, nil
		}
	},
}

func transportNames() string {
	names := make([]string, 0, len(transports))
	for k := range transports {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// setupTransport checks the multi-process flags against -transport and,
// for tcp, works out this process's part: a rank under a launcher's
// environment (the world size then comes from the launcher: -ranks must
// agree with it or be left at its default), the launcher otherwise. It
// returns the world size, which replaces ranks.
func setupTransport(name string, mpf launch.Flags, ranks int, ranksGiven bool, given map[string]bool) (*launch.Setup, int, error) {
	if name != "tcp" {
		for _, f := range []string{"nnodes", "node-rank", "master", "insecure"} {
			if given[f] {
				return nil, 0, fmt.Errorf("-%s applies to -transport tcp only", f)
			}
		}
		return nil, ranks, nil
	}
	s, err := mpf.Setup(ranks, ranksGiven, os.Getenv)
	if err != nil {
		return nil, 0, err
	}
	return &s, s.WorldSize, nil
}

// reports says whether this process prints the run's report: every process
// that holds rank 0 (a tcp rank other than 0 prints only its errors).
func (o *options) reports() bool {
	return o.mp == nil || o.mp.Launcher || o.mp.Env.Rank == 0
}

// rankCommand says what each rank of a -transport tcp job runs, given the
// job's arguments: a program, its arguments and extra environment.
type rankCommand func(args []string) (path string, argv, env []string, err error)

// thisProgram is the rank command of a real job: this program with the
// same arguments. (Tests run the test binary instead.)
func thisProgram(args []string) (path string, argv, env []string, err error) {
	path, err = os.Executable()
	return path, args, nil, err
}

// launchRanks is the launcher of a -transport tcp job: it starts this
// host's ranks as processes running the same command line and waits for
// them (see internal/launch). Rank 0's stdout is the job's report; the
// other ranks' lines come prefixed with "[rank r] ". Ctrl-C is forwarded
// to the ranks, which stop after the same step (and write the checkpoint)
// as in-process ranks do, so ctx's cancellation is not used.
func launchRanks(ctx context.Context, o *options, args []string, stdout io.Writer, ranks rankCommand) error {
	path, argv, env, err := ranks(args)
	if err != nil {
		return fmt.Errorf("-transport tcp: %w", err)
	}
	return launch.Run(context.WithoutCancel(ctx), launch.Config{
		Ranks: o.mp.LocalRanks, Nnodes: o.mp.Nnodes, NodeRank: o.mp.NodeRank,
		Master: o.mp.Master, Insecure: o.mp.Insecure,
		Path: path, Args: argv, Env: env,
		Stdout: stdout, Stderr: os.Stderr,
	})
}
