package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/launch"
)

// openTransport returns this process's endpoints of a world of cfg.ranks
// ranks: every rank for in-process transports, this process's rank for
// tcp (the world size then comes from the launcher and agrees with
// cfg.ranks; see parseConfig). The benchmark drives each endpoint on its own
// goroutine and works out everything else (which rank prints, the slowest
// rank's time, the wrong-element total) with collectives, and every process
// derives every rank's inputs from the same seed, so it runs unchanged on
// any transport. Only the process holding rank 0 prints the report.
type openTransport func(ctx context.Context, cfg *config) ([]transport.Conn, error)

// transports are the -transport values.
var transports = map[string]openTransport{
	"inproc": func(_ context.Context, cfg *config) ([]transport.Conn, error) {
		conns, _, err := allreducetest.InprocConns(cfg.ranks, cfg.timeout)
		return conns, err
	},
	// tcp: one rank per process. Without a launcher's environment the
	// process is the launcher instead (benchmark calls launchRanks) and
	// never connects.
	"tcp": func(ctx context.Context, cfg *config) ([]transport.Conn, error) {
		if cfg.mp == nil || cfg.mp.Launcher {
			return nil, fmt.Errorf("this process is not a rank (no RANK/WORLD_SIZE or other launcher variables)")
		}
		env := cfg.mp.Env
		conn, _, err := launch.Connect(ctx, launch.Options{Timeout: cfg.timeout, Insecure: cfg.mp.Insecure, Env: &env})
		if err != nil {
			return nil, err
		}
		return []transport.Conn{conn}, nil
	},
}

// setupTransport checks the multi-process flags against -transport and,
// for tcp, works out this process's part: a rank under a launcher's
// environment (-ranks must then agree with its world size or be left at
// its default), the launcher otherwise. It returns the world size, which
// replaces -ranks.
func setupTransport(name string, mpf launch.Flags, ranks int, given map[string]bool) (*launch.Setup, int, error) {
	if name != "tcp" {
		for _, f := range []string{"nnodes", "node-rank", "master", "insecure"} {
			if given[f] {
				return nil, 0, fmt.Errorf("-%s applies to -transport tcp only", f)
			}
		}
		return nil, ranks, nil
	}
	s, err := mpf.Setup(ranks, given["ranks"], os.Getenv)
	if err != nil {
		return nil, 0, err
	}
	return &s, s.WorldSize, nil
}

// holdsRank0 says whether one of conns is rank 0, whose process prints
// the report.
func holdsRank0(conns []transport.Conn) bool {
	for _, c := range conns {
		if c.Rank() == 0 {
			return true
		}
	}
	return false
}

// rankCommand says what each rank of a -transport tcp run executes, given
// the run's arguments: a program, its arguments and extra environment.
type rankCommand func(args []string) (path string, argv, env []string, err error)

// thisProgram is the rank command of a real run: this program with the
// same arguments. (Tests run the test binary instead.)
func thisProgram(args []string) (path string, argv, env []string, err error) {
	path, err = os.Executable()
	return path, args, nil, err
}

// launchRanks is the launcher of a -transport tcp run: it starts this
// host's ranks as processes with the same command line and waits for them
// (see internal/launch). Rank 0's stdout, the report, comes through as it
// is; other output with a "[rank r] " prefix.
func launchRanks(ctx context.Context, cfg *config, stdout io.Writer) error {
	path, argv, env, err := cfg.rankCmd(cfg.args)
	if err != nil {
		return fmt.Errorf("-transport tcp: %w", err)
	}
	// Ctrl-C is forwarded to the ranks by launch.Run itself.
	return launch.Run(context.WithoutCancel(ctx), launch.Config{
		Ranks: cfg.mp.LocalRanks, Nnodes: cfg.mp.Nnodes, NodeRank: cfg.mp.NodeRank,
		Master: cfg.mp.Master, Insecure: cfg.mp.Insecure,
		Path: path, Args: argv, Env: env,
		Stdout: stdout, Stderr: os.Stderr,
	})
}
