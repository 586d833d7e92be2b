package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// LaunchElastic is Launch with restarts after failures as e says (see
// Elastic): e.Prepare returns the command's arguments for a restart, which
// ranks turns into the ranks' command line as it does the first
// attempt's. With e nil or e.MaxRestarts 0 it is Launch.
func (t *Transport) LaunchElastic(ctx context.Context, args []string, ranks RankCommand, stdout io.Writer, e *Elastic) error {
	if !t.Launcher() {
		return errors.New("-transport " + t.Name + ": this process is not a job's launcher")
	}
	path, argv, env, err := ranks(args)
	if err != nil {
		return fmt.Errorf("-transport tcp: %w", err)
	}
	var el *Elastic
	if e != nil && e.Prepare != nil {
		c := *e
		prepare := e.Prepare
		c.Prepare = func(ctx context.Context, a Attempt) (Resume, error) {
			r, err := prepare(ctx, a)
			if err != nil {
				return r, err
			}
			if _, r.Args, r.Env, err = ranks(r.Args); err != nil {
				return r, fmt.Errorf("-transport tcp: %w", err)
			}
			if r.Env == nil {
				r.Env = []string{}
			}
			return r, nil
		}
		el = &c
	} else if e != nil {
		c := *e
		el = &c
	}
	return Run(context.WithoutCancel(ctx), Config{
		Ranks: t.MP.LocalRanks, Nnodes: t.MP.Nnodes, MaxNodes: t.MP.MaxNodes, NodeRank: t.MP.NodeRank,
		Master: t.MP.Master, Insecure: t.MP.Insecure, JoinTimeout: t.JoinTimeout,
		Path: path, Args: argv, Env: env,
		Stdout: stdout, Stderr: os.Stderr,
		Elastic: el,
	})
}
