package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// follow is the launcher of a node other than 0.
func (r *nodeRdzv) follow(ctx context.Context, sigs chan os.Signal) error {
	cfg, e := r.cfg, r.e
	rep := nodeReport{Node: r.node, Ranks: cfg.Ranks, Attempt: -1}
	var runErr error // the last attempt's, on this node
	for n := 0; ; n++ {
		sctx, stopSig := signalContext(ctx, sigs)
		plan, err := r.rendezvous(sctx, n, rep)
		if serr := stopSig(); serr != nil {
			return fmt.Errorf("launch: node %d: %w", r.node, serr)
		}
		if err != nil {
			return err
		}
		switch {
		case plan.Done && rep.Signal != "":
			return runErr // stopped by a signal here: as this node's ranks ended
		case plan.Done:
			return nil
		case plan.Err != "":
			return fmt.Errorf("launch: node 0 ended the job: %s", strings.TrimPrefix(plan.Err, "launch: "))
		}
		idx := slices.Index(plan.Members, r.node)
		if idx < 0 {
			why := "node 0 left it out"
			for _, d := range plan.Dropped {
				if d.Node == r.node {
					why = d.Reason
				}
			}
			return fmt.Errorf("launch: node %d was dropped from the job at restart %d: %s", r.node, n, why)
		}
		args := cfg.Args
		if n > 0 {
			leader := &Resume{Ranks: len(plan.Members) * plan.RanksPerNode, Step: plan.Step, From: plan.From, Found: plan.Found, Notes: plan.Notes}
			f := Failure{Attempt: n - 1, Exit: &ExitError{Rank: -1, Err: errors.New("unknown")}}
			if pf := plan.Failure; pf != nil {
				f = Failure{Attempt: n - 1, Node: pf.Node, Exit: &ExitError{Rank: pf.Rank, Pid: pf.Pid, Err: errors.New(pf.Reason)},
					Step: pf.Step, AtStartup: pf.AtStartup}
			}
			res, err := e.Prepare(ctx, Attempt{Restart: n, MinRanks: e.MinRanks, MaxRanks: leader.Ranks, Failure: f,
				RanksPerNode: plan.RanksPerNode, NodeRank: idx, Leader: leader})
			if err != nil {
				rep = nodeReport{Node: r.node, Ranks: cfg.Ranks, Attempt: n, Fatal: err.Error()}
				r.post(ctx, n+1, rep)
				return fmt.Errorf("launch: node %d: restart %d: %w", r.node, n, err)
			}
			args = res.Args
			if res.Env != nil {
				r.cfg.Env = res.Env
			}
			from := "from step " + strconv.FormatInt(plan.Step, 10)
			if plan.From == "" {
				from = "from the beginning"
			}
			fmt.Fprintf(r.w.errOut, "launch: node %d: restart %d (node 0's plan) %s on %d ranks, %d nodes; this node is node %d of them\n",
				r.node, n, from, leader.Ranks, len(plan.Members), idx)
		}
		rep, _, _, runErr = r.runAttempt(ctx, sigs, plan, args, nil, func(*progress) {})
		if rep.Fatal != "" {
			r.post(ctx, n+1, rep)
			return runErr
		}
	}
}
