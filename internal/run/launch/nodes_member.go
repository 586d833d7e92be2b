package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// follow is the launcher of a node other than 0.
func (r *nodeRdzv) follow(ctx context.Context, sigs chan os.Signal) error {
	cfg, e := r.cfg, r.e
	rep := nodeReport{Node: r.node, Ranks: cfg.Ranks, Attempt: -1, Nnodes: cfg.Nnodes, MaxNodes: cfg.MaxNodes, Master: cfg.Master, MasterLoopback: loopbackHost(r.host),
		Addr: nodeAddr(cfg.Master)}
	var runErr error       // the last attempt's, on this node
	var admitted *nodePlan // rejoining a running job: the attempt node 0 takes it into
	if r.rj.rejoin {
		p, err := r.enter(ctx, sigs, rep) // the last call's, else askRejoin's
		if err != nil {
			return err
		}
		admitted = &p
	}
	for n := 0; ; n++ {
		var plan nodePlan
		var err error
		if admitted != nil {
			n, plan, admitted = admitted.Attempt, *admitted, nil
		} else {
			sctx, stopSig := signalContext(ctx, sigs)
			plan, err = r.rendezvous(sctx, n, rep)
			if serr := stopSig(); serr != nil {
				return fmt.Errorf("launch: node %d: %w", r.node, serr)
			}
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
			return fmt.Errorf("launch: node 0 ended the job: %s", strings.TrimPrefix(strings.TrimPrefix(plan.Err, "launch: "), "node 0: "))
		}
		idx := slices.Index(plan.Members, r.node)
		if idx < 0 && !r.rj.grow {
			why := "node 0 left it out"
			for _, d := range plan.Dropped {
				if d.Node == r.node {
					why = d.Reason
				}
			}
			return fmt.Errorf("launch: node %d was dropped from the job at restart %d: %s", r.node, n, why)
		}
		args := cfg.Args
		if own := cfg.Getenv(EnvRunID); n == 0 && own != "" && own != plan.RunID {
			fmt.Fprintf(r.w.errOut, "launch: node %d: %s=%s here; the job runs under node 0's run id %s\n", r.node, EnvRunID, untrusted.Text(own, maxRunIDLen), plan.RunID)
		}
		if n > 0 && r.rj.names == nil { // (a rejoining node's ranks heal their state)
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
			fmt.Fprintf(r.w.errOut, "launch: node %d: restart %d (node 0's plan) %s on %s, %s; this node is node %d of them\n",
				r.node, n, from, Count(leader.Ranks, "rank"), Count(len(plan.Members), "node"), idx)
		}
		rep, _, _, runErr = r.runAttempt(ctx, sigs, plan, args, nil, func(*progress) {})
		// Later attempts start the node's ranks anew, as a member's.
		r.rj.names, r.rj.grow = nil, false
		if ctx.Err() != nil { // the caller ended this launcher, or node 0 is lost: it leaves without a report
			return fmt.Errorf("launch: node %d: %w", r.node, context.Cause(ctx))
		}
		if r.rj.left != "" && rep.Signal == "" {
			return r.leftError() // node 0 does not wait for it (noteGone)
		}
		if rep.Fatal != "" {
			r.post(ctx, n+1, rep)
			return runErr
		}
	}
}

// runAttempt runs plan's attempt on this node: args are its ranks'
// arguments, storeLn (node 0) rank 0's bound store socket. It returns the
// node's report of how the attempt ended, the job and the status pipe's
// progress, with onProgress called whenever a rank reports progress.
func (r *nodeRdzv) runAttempt(ctx context.Context, sigs chan os.Signal, plan nodePlan, args []string, storeLn *os.File, onProgress func(*progress)) (nodeReport, *job, *progress, error) {
	n := plan.Attempt
	// A new node joining (nodes_scaleup.go) is no member of plan: its
	// joining ranks get RANK as node 0's would, which they do not use.
	idx := max(slices.Index(plan.Members, r.node), 0)
	stopCh := make(chan string, 1)
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go r.watchStop(wctx, n, stopCh)

	var seqMu sync.Mutex
	var seq int64
	seqDone := make(chan struct{})
	var once sync.Once
	onFail := func(e *ExitError) {
		once.Do(func() {
			go func() {
				defer close(seqDone)
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				s, err := r.store.Add(c, r.key(n, "stop-seq"), 1)
				if err != nil {
					fmt.Fprintf(r.w.errOut, "launch: node %d: telling the other nodes of the failure: %v\n", r.node, err)
					return
				}
				seqMu.Lock()
				seq = s
				seqMu.Unlock()
				if s == 1 {
					b, _ := json.Marshal(stopMsg{Node: r.node, Rank: e.Rank, Pid: e.Pid, Reason: e.Reason()})
					k := r.key(n, "stop")
					if err := r.store.Set(c, k, r.seal.seal(k, b)); err != nil {
						fmt.Fprintf(r.w.errOut, "launch: node %d: telling the other nodes of the failure: %v\n", r.node, err)
					}
				}
			}()
		})
	}
	a := attempt{
		ranks: plan.RanksPerNode, args: args,
		getenv: runIDGetenv(r.cfg.Getenv, plan.RunID),
		nnodes: len(plan.Members), nodeRank: idx, joinNames: r.rj.names,
		master:  net.JoinHostPort(r.host, strconv.Itoa(plan.StorePort)),
		storeLn: storeLn, onFail: onFail, stopReq: stopCh,
	}
	a.env = r.attemptEnv(plan)
	startSurvive, endSurvive := func() {}, func() {}
	if r.e.Continue {
		var err error
		if startSurvive, endSurvive, err = r.nodeSurvival(ctx, &a, plan, idx); err != nil {
			return nodeReport{Node: r.node, Ranks: r.cfg.Ranks, Attempt: n, Fatal: err.Error()}, nil, nil, err
		}
	}
	j, prog, err := startWithStatus(r.cfg, r.w, a)
	if err != nil {
		endSurvive()
		a.survive.close()
		return nodeReport{Node: r.node, Ranks: r.cfg.Ranks, Attempt: n, Fatal: err.Error()}, nil, nil, err
	}
	startSurvive()
	defer func() { endSurvive(); a.survive.close() }()
	j.progress = prog.notify
	j.onProgress = func() { onProgress(prog) }
	err = j.wait(ctx, sigs)
	select {
	case <-prog.done:
	case <-time.After(r.cfg.Grace):
	}
	rep := nodeReport{Node: r.node, Ranks: r.cfg.Ranks, Attempt: n}
	if j.signaled != nil {
		rep.Signal = j.signaled.String()
	}
	// The failure this node reports: its culprit, which is a rank killed
	// by a signal the launcher did not send even when another node's stop
	// request came first (then this node has no first failure of its own).
	fail := j.culprit()
	if fail != nil && a.survive.removed(fail.Rank) {
		fail = nil // the job went on without it
	}
	switch {
	case fail != nil && j.signaled == nil:
		var s int64
		if fail == j.first { // its stop sequence number is being taken (onFail)
			select {
			case <-seqDone:
			case <-time.After(10 * time.Second):
			}
			seqMu.Lock()
			s = seq
			seqMu.Unlock()
		}
		rep.Fail = &wireFailure{Rank: fail.Rank, Pid: fail.Pid, Reason: fail.Reason(),
			Consequence: j.consequence(fail), Seq: s}
	case err == nil && j.stoppedAt.IsZero():
		rep.OK = true
	}
	return rep, j, prog, err
}

// consequence reports whether e, a rank's failure, looks like the
// consequence of another rank's (its last error blames a peer) rather
// than its own.
func (j *job) consequence(e *ExitError) bool {
	p := j.proc(e.Rank)
	if p == nil || e.State == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.rec.ownSignal && consequenceRE.MatchString(p.rec.lastErr)
}

// watchStop waits for attempt n's stop key until ctx ends and sends what
// stopped it (another node's failure) on stop.
func (r *nodeRdzv) watchStop(ctx context.Context, n int, stop chan<- string) {
	k := r.key(n, "stop")
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := r.store.Get(c, k)
		cancel()
		if err != nil {
			if !errors.Is(err, rendezvous.ErrTimeout) {
				select { // not a lost key: the store is gone or broken; do not spin
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		m, err := decodeStop(r.seal, k, b, r.cfg.mostNodes())
		if err != nil {
			fmt.Fprintf(r.w.errOut, "launch: node %d: ignoring a stop request that does not check (%s): %v\n", r.node, k, err)
			return
		}
		if m.Node == r.node {
			return // this node's own failure: its ranks are stopping already
		}
		stop <- fmt.Sprintf("launch: node %d's rank %d (pid %d) %s; stopping this node's ranks", m.Node, m.Rank, m.Pid, m.Reason)
		return
	}
}

// runIDGetenv is getenv with the run id id.
func runIDGetenv(getenv func(string) string, id string) func(string) string {
	return func(k string) string {
		if k == EnvRunID {
			return id
		}
		return getenv(k)
	}
}
