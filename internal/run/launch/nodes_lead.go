package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// lead is node 0's launcher: it runs the attempts, and after each decides
// with the restart policy what the nodes do next.
func (r *nodeRdzv) lead(ctx context.Context, sigs chan os.Signal) error {
	plan, err := r.join(ctx, sigs)
	if err != nil {
		return err
	}
	cfg, e := r.cfg, r.e
	perNode, baseID := cfg.Ranks, plan.RunID
	args := cfg.Args
	policy := newRestartPolicy(e, cfg.Nnodes*perNode, perNode)
	rep := &restartReport{onRestart: e.OnRestart, w: r.w.out}
	for n := 0; ; n++ {
		plan.Attempt, plan.JobID = n, e.JobID
		if n > 0 {
			plan.RunID = baseID + "-restart" + strconv.Itoa(n)
		}
		port, storeLn, err := bindStorePort(r.host)
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			port, storeLn, err = bindStorePort("")
		}
		if err != nil {
			return r.finish(ctx, plan, len(plan.Members)-1, fmt.Errorf("launch: node 0: binding a port for rank 0's store: %w", err))
		}
		plan.StorePort = port
		if err := r.publish(ctx, plan); err != nil {
			storeLn.Close()
			return err
		}
		own, j, prog, runErr := r.runAttempt(ctx, sigs, plan, args, storeLn, func(p *progress) {
			_, _, at := p.snapshot()
			rep.report(at)
		})
		if j == nil { // the attempt could not start here
			return r.finish(ctx, nodePlan{Attempt: n + 1}, len(plan.Members)-1, runErr)
		}
		_, _, at := prog.snapshot()
		rep.report(at)
		plan = r.withoutGone(r.withAdded(plan)) // nodes taken in (scale up); survivors continued without the gone

		// Who came back, and how did the attempt end on each node?
		sctx, stopSig := signalContext(ctx, sigs)
		reps, silent := r.gather(sctx, n+1, plan.Members[1:], time.Now().Add(e.RejoinTimeout))
		next := nodePlan{Attempt: n + 1, RanksPerNode: perNode}
		if err := stopSig(); err != nil {
			return r.finish(ctx, next, len(reps), fmt.Errorf("launch: node 0: %w while waiting for the other nodes", err))
		}
		reps[0] = own
		end := r.attemptEnd(plan, reps, silent, runErr)
		if end.Stopped == "" && !end.Clean {
			end.Failure = r.blame(plan, reps, end.Dropped, j, prog)
		}
		step := policy.Step(end)
		if step.Backoff > 0 {
			sctx, stopSig := signalContext(ctx, sigs)
			_ = backoff(sctx, nil, e.Backoff, step.Backoff)
			if err := stopSig(); err != nil {
				return r.finish(ctx, next, len(reps)-1, fmt.Errorf("launch: %w (after %s)", err, end.Failure))
			}
		}
		if step.Done {
			return r.finish(ctx, next, len(reps)-1, step.Err)
		}
		res, err := e.Prepare(ctx, step.Ask)
		restart, members, err := policy.Resume(res, err)
		if err != nil {
			return r.finish(ctx, next, len(reps)-1, err)
		}
		rep.pending = &restart
		f := restart.Failure
		fmt.Fprintf(r.w.errOut, "launch: node 0: restart %d of at most %d after %s: %s on %s, %s (%s lost)%s\n",
			restart.Number, e.MaxRestarts, f, resumeText(res), Count(res.Ranks, "rank"), listText("node", members), Count(int(restart.StepsLost), "step"), droppedSuffix(restart.Dropped))
		args = res.Args
		if res.Env != nil {
			r.cfg.Env = res.Env
		}
		plan = nodePlan{Attempt: n + 1, Members: members, RanksPerNode: perNode, Step: res.Step, From: res.From, Found: res.Found,
			Notes: res.Notes, Dropped: restart.Dropped,
			Failure: &planFailure{Node: f.Node, Rank: f.Exit.Rank, Pid: f.Exit.Pid, Reason: f.Exit.Reason(), Step: f.Step, AtStartup: f.AtStartup}}
	}
}

// attemptEnd reads how plan's attempt ended from every node's report
// (reps, node 0's included; runErr is node 0's own error; silent the nodes
// that stopped beating, with the reason): the nodes that came back, node 0
// first, those lost, and whether a signal stopped one.
func (r *nodeRdzv) attemptEnd(plan nodePlan, reps map[int]nodeReport, silent map[int]string, runErr error) attemptEnd {
	end := attemptEnd{Err: runErr}
	failed := false
	for _, m := range plan.Members {
		rep, ok := reps[m]
		switch {
		case !ok && silent[m] != "":
			end.Dropped = append(end.Dropped, DroppedNode{Node: m, Reason: silent[m]})
			failed = true
			continue
		case !ok:
			end.Dropped = append(end.Dropped, DroppedNode{Node: m, Reason: fmt.Sprintf("its launcher did not come back within %v", r.e.RejoinTimeout)})
			failed = true
			continue
		case rep.Fatal != "":
			end.Dropped = append(end.Dropped, DroppedNode{Node: m, Reason: "its launcher gave up: " + rep.Fatal})
			failed = true
			continue
		case rep.Signal != "":
			if end.Stopped == "" {
				end.Stopped = fmt.Sprintf("node %d's launcher was stopped by %s", m, rep.Signal)
			}
			failed = failed || !rep.OK
		case !rep.OK:
			failed = true
		}
		end.Members = append(end.Members, m)
	}
	end.Clean = !failed
	return end
}

// blame is the failure that ended plan's attempt, from every node's
// report (reps, node 0's included) and node 0's job and progress: the
// first failure told that is not a consequence of another's; else a node
// that did not come back; else the first told.
func (r *nodeRdzv) blame(plan nodePlan, reps map[int]nodeReport, dropped []DroppedNode, j *job, prog *progress) Failure {
	start, last, trainedAt := prog.snapshot()
	f := Failure{Attempt: plan.Attempt, Ranks: len(plan.Members) * plan.RanksPerNode, Nodes: len(plan.Members),
		StartStep: start, Step: last, AtStartup: trainedAt.IsZero(), At: time.Now()}
	for _, t := range []time.Time{j.failedAt, j.stoppedAt} {
		if !t.IsZero() && t.Before(f.At) {
			f.At = t
		}
	}
	type cand struct {
		node int
		w    *wireFailure
	}
	var cs []cand
	for _, m := range plan.Members {
		if rep, ok := reps[m]; ok && rep.Fail != nil {
			cs = append(cs, cand{m, rep.Fail})
		}
	}
	order := func(c cand) int64 {
		if c.w.Seq <= 0 {
			return 1 << 62
		}
		return c.w.Seq
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.w.Consequence != b.w.Consequence {
			if a.w.Consequence {
				return 1
			}
			return -1
		}
		return int(min(max(order(a)-order(b), -1), 1))
	})
	switch {
	case len(cs) > 0 && (!cs[0].w.Consequence || len(dropped) == 0):
		c := cs[0]
		if c.node == 0 && j.first != nil && j.first.Rank == c.w.Rank {
			f.Exit = j.first
		} else {
			f.Exit = &ExitError{Rank: c.w.Rank, Pid: c.w.Pid, Err: errors.New(c.w.Reason)}
		}
		f.Node = c.node
	case len(dropped) > 0:
		d := dropped[0]
		idx := slices.Index(plan.Members, d.Node)
		lost := &NodeLostError{Node: d.Node, Addr: r.addrs[d.Node], Reason: d.Reason}
		for k := range plan.RanksPerNode {
			lost.Ranks = append(lost.Ranks, idx*plan.RanksPerNode+k)
		}
		f.Exit = &ExitError{Rank: lost.Ranks[0], Err: lost}
		f.Node = d.Node
	default:
		f.Exit = &ExitError{Rank: -1, Err: errors.New("the attempt failed, but no node reported a failed rank")}
	}
	return f
}
