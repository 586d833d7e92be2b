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
	"syscall"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Restarts with several nodes. Each node's launcher (-nnodes K -node-rank
// i -master host:port) takes part in every attempt through a rendezvous of
// launchers: node 0's launcher hosts a store (rendezvous's TCP store,
// authenticated with RINGDDP_SECRET) at -master, and the others join it.
// Rank 0's store, which dies with each attempt, is elsewhere: on a fresh
// port of the master's host that node 0's launcher binds for every
// attempt and hands to rank 0 as a descriptor (as on one host).
//
// Attempt n goes so, its keys under "elastic/<n>/":
//
//  1. Every node but 0 posts a report (node/<i>): before the first
//     attempt that it is there and its -ranks; after an attempt, how that
//     ended on its node: every rank exited 0; or its first failure (the
//     rank, pid, how it ended, whether it looks like a consequence of
//     another's failure, and the order in which it was told: stop-seq);
//     or that its launcher was stopped by a signal.
//  2. Node 0 gathers them: before the first attempt from every node
//     (waiting Elastic.JoinTimeout); after one, from the nodes of that
//     attempt, waiting Elastic.RejoinTimeout after its own ranks have
//     ended. A node that has not reported by then is dropped. Node 0 then
//     decides: done (every rank of every node that reported exited 0, and
//     node 0's own did), an error that ends the job (restarts exhausted,
//     fewer ranks left than Elastic.MinRanks, a stop by a signal), or the
//     next attempt: the failure to blame (the first that is not a
//     consequence), the checkpoint and world size (Elastic.Prepare; the
//     world a multiple of the ranks per node, whole nodes dropped from
//     the highest), the members renumbered in their order, the run id
//     (the job's, "-restart<n>" appended) and rank 0's store port. It
//     publishes the plan (plan) and, for a last plan, waits for the others
//     to have read it (ack) before it closes the store.
//  3. Every member starts its ranks as the plan says (Elastic.Prepare on
//     each node turns node 0's choice into its own command line), and
//     watches the stop key while they run. The first node to see one of
//     its ranks fail takes stop-seq 1 and sets stop; every node's watcher
//     then stops its ranks, so all the nodes end the attempt together.
//
// Node 0 cannot be dropped: when its launcher dies, the others lose the
// rendezvous and end with an error.

// nodeReport is what a node tells node 0 at a rendezvous.
type nodeReport struct {
	Node    int          `json:"node"`    // its -node-rank at the start: the node's name for the whole job
	Ranks   int          `json:"ranks"`   // its -ranks
	Attempt int          `json:"attempt"` // the attempt whose end this reports (-1: joining)
	OK      bool         `json:"ok"`      // every rank exited with status 0
	Fail    *wireFailure `json:"fail,omitempty"`
	Signal  string       `json:"signal,omitempty"` // its launcher was stopped by this signal
	Fatal   string       `json:"fatal,omitempty"`  // its launcher gives up (it leaves the job)
}

// wireFailure is a node's first failed rank, as reported.
type wireFailure struct {
	Rank        int    `json:"rank"`
	Pid         int    `json:"pid"`
	Reason      string `json:"reason"`
	Consequence bool   `json:"consequence"` // its last error blames another rank
	Seq         int64  `json:"seq"`         // its place in stop-seq (0: not counted)
}

// stopMsg is the stop key's value: the failure that stopped the attempt.
type stopMsg struct {
	Node   int    `json:"node"`
	Rank   int    `json:"rank"`
	Pid    int    `json:"pid"`
	Reason string `json:"reason"`
}

// nodePlan is node 0's decision for an attempt.
type nodePlan struct {
	Attempt      int           `json:"attempt"`
	Done         bool          `json:"done,omitempty"` // the job is over, successfully
	Err          string        `json:"err,omitempty"`  // the job is over: why it failed
	RunID        string        `json:"run_id"`
	StorePort    int           `json:"store_port"`
	Members      []int         `json:"members"` // the nodes, by their first -node-rank, in their new order
	RanksPerNode int           `json:"ranks_per_node"`
	Step         int64         `json:"step"`
	From         string        `json:"from,omitempty"`
	Found        bool          `json:"found,omitempty"`
	Notes        []string      `json:"notes,omitempty"`
	Failure      *planFailure  `json:"failure,omitempty"`
	Dropped      []DroppedNode `json:"dropped,omitempty"`
}

// planFailure is the failure a restart's plan follows.
type planFailure struct {
	Node      int    `json:"node"`
	Rank      int    `json:"rank"`
	Pid       int    `json:"pid"`
	Reason    string `json:"reason"`
	Step      int64  `json:"step"`
	AtStartup bool   `json:"at_startup"`
}

// nodeRdzv is one node launcher's side of the rendezvous.
type nodeRdzv struct {
	cfg   Config
	e     *Elastic
	w     outputs
	store *rendezvous.TCPStore
	node  int    // this node's -node-rank at the start
	host  string // the master's host
}

// key is attempt n's key k.
func (r *nodeRdzv) key(n int, k string) string { return "elastic/" + strconv.Itoa(n) + "/" + k }

// runNodes runs an elastic job of several nodes (see above).
func runNodes(ctx context.Context, cfg Config, w outputs, sigs chan os.Signal) error {
	e := cfg.Elastic
	host, port, err := splitMaster(cfg.Master)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	secret := cfg.Getenv(EnvSecret)
	if !cfg.Insecure && secret == "" {
		return fmt.Errorf("launch: %w", errNoSharedSecret)
	}
	scfg := rendezvous.StoreConfig{Secret: []byte(secret), Insecure: cfg.Insecure, Timeout: e.JoinTimeout}
	r := &nodeRdzv{cfg: cfg, e: e, w: w, node: cfg.NodeRank, host: host}
	sctx, stop := signalContext(ctx, sigs)
	if cfg.NodeRank == 0 {
		ln, err := listenHostPort(host, port)
		if err == nil {
			r.store, err = rendezvous.ConnectListener(sctx, rendezvous.Env{Rank: 0, WorldSize: cfg.Nnodes}, ln, scfg)
		}
		if err != nil {
			stop()
			return fmt.Errorf("launch: node 0: hosting the launchers' rendezvous at %s: %w", cfg.Master, err)
		}
	} else if r.store, err = rendezvous.DialStore(sctx, cfg.Master, scfg); err != nil {
		stop()
		return fmt.Errorf("launch: node %d: joining node 0's launcher at %s: %w", cfg.NodeRank, cfg.Master, err)
	}
	if err := stop(); err != nil {
		r.store.Close()
		return fmt.Errorf("launch: node %d: %w", cfg.NodeRank, err)
	}
	defer r.store.Close()
	if cfg.NodeRank == 0 {
		return r.lead(ctx, sigs)
	}
	return r.follow(ctx, sigs)
}

// listenHostPort listens on host:port, or on every interface when host
// names this machine through an address it does not hold (as rank 0's
// store does).
func listenHostPort(host string, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		ln, err = net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	}
	return ln, err
}

// signalContext is ctx, cancelled when a signal arrives on sigs, until
// stop is called (the attempts read sigs themselves). stop returns why the
// context ended (the signal, or ctx's error), nil if it had not.
func signalContext(ctx context.Context, sigs chan os.Signal) (context.Context, func() error) {
	c, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("stopped by %v", s))
		case <-done:
		}
	}()
	return c, func() error {
		close(done)
		wg.Wait()
		var err error
		if c.Err() != nil {
			err = context.Cause(c)
		}
		cancel(nil)
		return err
	}
}

// runAttempt runs plan's attempt on this node: args are its ranks'
// arguments, storeLn (node 0) rank 0's bound store socket. It returns the
// node's report of how the attempt ended, the job and the status pipe's
// progress, with onProgress called whenever a rank reports progress.
func (r *nodeRdzv) runAttempt(ctx context.Context, sigs chan os.Signal, plan nodePlan, args []string, storeLn *os.File, onProgress func(*progress)) (nodeReport, *job, *progress, error) {
	n := plan.Attempt
	idx := slices.Index(plan.Members, r.node)
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
					if err := r.store.Set(c, r.key(n, "stop"), b); err != nil {
						fmt.Fprintf(r.w.errOut, "launch: node %d: telling the other nodes of the failure: %v\n", r.node, err)
					}
				}
			}()
		})
	}
	a := attempt{
		ranks: plan.RanksPerNode, args: args,
		env:    []string{EnvRestart + "=" + strconv.Itoa(n)},
		getenv: runIDGetenv(r.cfg.Getenv, plan.RunID),
		nnodes: len(plan.Members), nodeRank: idx,
		master:  net.JoinHostPort(r.host, strconv.Itoa(plan.StorePort)),
		storeLn: storeLn, onFail: onFail, stopReq: stopCh,
	}
	j, prog, err := startWithStatus(r.cfg, r.w, a)
	if err != nil {
		return nodeReport{Node: r.node, Ranks: r.cfg.Ranks, Attempt: n, Fatal: err.Error()}, nil, nil, err
	}
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
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := r.store.Get(c, r.key(n, "stop"))
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
		var m stopMsg
		if json.Unmarshal(b, &m) != nil || m.Node == r.node {
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

// publish sets attempt n's plan.
func (r *nodeRdzv) publish(ctx context.Context, p nodePlan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := r.store.Set(ctx, r.key(p.Attempt, "plan"), b); err != nil {
		return fmt.Errorf("launch: node 0: publishing the plan of attempt %d: %w", p.Attempt+1, err)
	}
	return nil
}

// finish publishes a last plan (done, or err) and waits a while for the
// nodes that reported to have read it: node 0's store goes with its
// launcher.
func (r *nodeRdzv) finish(ctx context.Context, p nodePlan, readers int, err error) error {
	if err != nil {
		p.Err = err.Error()
	} else {
		p.Done = true
	}
	if perr := r.publish(ctx, p); perr != nil {
		return errors.Join(err, perr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, time.Second)
		got, aerr := r.store.Add(c, r.key(p.Attempt, "ack"), 0)
		cancel()
		if aerr != nil || got >= int64(readers) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// gather waits until deadline for attempt n's reports from the nodes
// want; it returns those that came.
func (r *nodeRdzv) gather(ctx context.Context, n int, want []int, deadline time.Time) map[int]nodeReport {
	got := map[int]nodeReport{}
	for _, node := range want {
		c, cancel := context.WithDeadline(ctx, deadline)
		b, err := r.store.Get(c, r.key(n, "node/"+strconv.Itoa(node)))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return got
			}
			continue
		}
		var rep nodeReport
		if json.Unmarshal(b, &rep) == nil && rep.Node == node {
			got[node] = rep
		}
	}
	return got
}

// lead is node 0's launcher.
func (r *nodeRdzv) lead(ctx context.Context, sigs chan os.Signal) error {
	cfg, e := r.cfg, r.e
	perNode := cfg.Ranks
	baseID := cfg.Getenv(EnvRunID)
	if baseID == "" {
		id, err := randomHex(8)
		if err != nil {
			return fmt.Errorf("launch: making the run id: %w", err)
		}
		baseID = "elastic-" + id
	}
	members := make([]int, cfg.Nnodes)
	for i := range members {
		members[i] = i
	}
	fmt.Fprintf(r.w.errOut, "launch: node 0: waiting for %d nodes' launchers at %s (at most %v)\n", cfg.Nnodes-1, cfg.Master, e.JoinTimeout)
	sctx, stopSig := signalContext(ctx, sigs)
	reps := r.gather(sctx, 0, members[1:], time.Now().Add(e.JoinTimeout))
	plan := nodePlan{Attempt: 0, RunID: baseID, Members: members, RanksPerNode: perNode}
	if err := stopSig(); err != nil {
		return r.finish(ctx, plan, len(reps), fmt.Errorf("launch: node 0: %w while waiting for the other nodes", err))
	}
	var missing, bad []string
	for _, m := range members[1:] {
		rep, ok := reps[m]
		switch {
		case !ok:
			missing = append(missing, strconv.Itoa(m))
		case rep.Ranks != perNode:
			bad = append(bad, fmt.Sprintf("node %d has -ranks %d", m, rep.Ranks))
		}
	}
	if len(missing) > 0 {
		return r.finish(ctx, plan, len(reps), fmt.Errorf("launch: node 0: node(s) %s did not join within %v (-master %s)", strings.Join(missing, ", "), e.JoinTimeout, cfg.Master))
	}
	if len(bad) > 0 {
		return r.finish(ctx, plan, len(reps), fmt.Errorf("launch: node 0: every node must run as many ranks (-ranks) as node 0's %d: %s", perNode, strings.Join(bad, "; ")))
	}

	args := cfg.Args
	var failures []Failure
	var pending *Restart
	report := func(trainedAt time.Time) {
		if pending == nil {
			return
		}
		if !trainedAt.IsZero() {
			pending.TrainingAgainAt = trainedAt
			pending.TrainingAgain = trainedAt.Sub(pending.Failure.At)
		}
		if e.OnRestart != nil {
			e.OnRestart(r.w.out, *pending)
		}
		pending = nil
	}
	startups := 0
	for n := 0; ; n++ {
		plan.Attempt = n
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
			report(at)
		})
		if j == nil { // the attempt could not start here
			return r.finish(ctx, nodePlan{Attempt: n + 1}, len(plan.Members)-1, runErr)
		}
		_, _, at := prog.snapshot()
		report(at)

		// Who came back, and how did the attempt end on each node?
		sctx, stopSig := signalContext(ctx, sigs)
		reps := r.gather(sctx, n+1, plan.Members[1:], time.Now().Add(e.RejoinTimeout))
		next := nodePlan{Attempt: n + 1, RanksPerNode: perNode}
		if err := stopSig(); err != nil {
			return r.finish(ctx, next, len(reps), fmt.Errorf("launch: node 0: %w while waiting for the other nodes", err))
		}
		reps[0] = own
		var dropped []DroppedNode
		var back []int // the nodes that came back, node 0 first
		failed, signaled := false, ""
		for _, m := range plan.Members {
			rep, ok := reps[m]
			switch {
			case !ok:
				dropped = append(dropped, DroppedNode{Node: m, Reason: fmt.Sprintf("its launcher did not come back within %v", e.RejoinTimeout)})
				failed = true
				continue
			case rep.Fatal != "":
				dropped = append(dropped, DroppedNode{Node: m, Reason: "its launcher gave up: " + rep.Fatal})
				failed = true
				continue
			case rep.Signal != "":
				if signaled == "" {
					signaled = fmt.Sprintf("node %d's launcher was stopped by %s", m, rep.Signal)
				}
				failed = failed || !rep.OK
			case !rep.OK:
				failed = true
			}
			back = append(back, m)
		}
		if signaled != "" { // no restart after a signal: the job ends as its ranks did
			if runErr == nil && failed {
				runErr = fmt.Errorf("launch: %s, and the job did not end cleanly: not restarting it", signaled)
			}
			return r.finish(ctx, next, len(reps)-1, runErr)
		}
		if !failed && own.OK {
			for _, d := range dropped {
				fmt.Fprintf(r.w.errOut, "launch: node 0: the job is done, but node %d's %s\n", d.Node, d.Reason)
			}
			return r.finish(ctx, next, len(reps)-1, nil)
		}

		f := r.blame(plan, reps, dropped, j, prog)
		failures = append(failures, f)
		if n >= e.MaxRestarts {
			return r.finish(ctx, next, len(reps)-1, fmt.Errorf("launch: %w", &RestartsExhaustedError{MaxRestarts: e.MaxRestarts, Failures: failures}))
		}
		if f.AtStartup {
			startups++
			if f.Node != 0 && slices.Contains(back, f.Node) && (len(back)-1)*perNode >= e.MinRanks {
				back = slices.DeleteFunc(back, func(m int) bool { return m == f.Node })
				dropped = append(dropped, DroppedNode{Node: f.Node, Reason: "its rank failed at start-up"})
			}
			sctx, stopSig := signalContext(ctx, sigs)
			_ = backoff(sctx, nil, e.Backoff, startups)
			if err := stopSig(); err != nil {
				return r.finish(ctx, next, len(reps)-1, fmt.Errorf("launch: %w (after %s)", err, f))
			}
		} else {
			startups = 0
		}
		if len(back)*perNode < e.MinRanks {
			return r.finish(ctx, next, len(reps)-1, fmt.Errorf("launch: after %s: %s; the nodes left (%s) run %d ranks, fewer than the minimum of %d (-min-ranks)",
				f, droppedText(dropped), intsText(back), len(back)*perNode, e.MinRanks))
		}
		res, err := e.Prepare(ctx, Attempt{Restart: n + 1, MinRanks: e.MinRanks, MaxRanks: len(back) * perNode,
			Failure: f, RanksPerNode: perNode})
		if err == nil && (res.Ranks < e.MinRanks || res.Ranks > len(back)*perNode || res.Ranks%perNode != 0) {
			err = fmt.Errorf("%d ranks asked for, want a multiple of %d in %d..%d", res.Ranks, perNode, e.MinRanks, len(back)*perNode)
		}
		if err != nil {
			return r.finish(ctx, next, len(reps)-1, fmt.Errorf("launch: restarting after %s: %w", f, err))
		}
		k := res.Ranks / perNode
		for _, m := range back[k:] {
			dropped = append(dropped, DroppedNode{Node: m, Reason: "the global batch is kept on fewer nodes"})
		}
		back = back[:k]
		lost := int64(0)
		if f.Step >= 0 {
			lost = max(0, f.Step-res.Step)
		}
		pending = &Restart{Number: n + 1, Failure: f, Resume: res, StepsLost: lost, Nodes: k, Dropped: dropped}
		from := "resuming from step " + strconv.FormatInt(res.Step, 10)
		if res.From == "" {
			from = "starting again from the beginning"
		}
		fmt.Fprintf(r.w.errOut, "launch: node 0: restart %d of at most %d after %s: %s on %d ranks, nodes %s (%d steps lost)%s\n",
			n+1, e.MaxRestarts, f, from, res.Ranks, intsText(back), lost, droppedSuffix(dropped))
		args = res.Args
		if res.Env != nil {
			r.cfg.Env = res.Env
		}
		plan = nodePlan{Attempt: n + 1, Members: back, RanksPerNode: perNode, Step: res.Step, From: res.From, Found: res.Found,
			Notes: res.Notes, Dropped: dropped,
			Failure: &planFailure{Node: f.Node, Rank: f.Exit.Rank, Pid: f.Exit.Pid, Reason: f.Exit.Reason(), Step: f.Step, AtStartup: f.AtStartup}}
	}
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
		f.Exit = &ExitError{Rank: idx * plan.RanksPerNode, Err: fmt.Errorf("lost with its node (%s)", d.Reason)}
		f.Node = d.Node
	default:
		f.Exit = &ExitError{Rank: -1, Err: errors.New("the attempt failed, but no node reported a failed rank")}
	}
	return f
}

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

// post sets this node's report for rendezvous n.
func (r *nodeRdzv) post(ctx context.Context, n int, rep nodeReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return r.store.Set(c, r.key(n, "node/"+strconv.Itoa(r.node)), b)
}

// rendezvous posts this node's report for rendezvous n and waits for node
// 0's plan, which it acknowledges.
func (r *nodeRdzv) rendezvous(ctx context.Context, n int, rep nodeReport) (nodePlan, error) {
	lost := func(err error) error {
		return fmt.Errorf("launch: node %d lost node 0's launcher (its rendezvous at %s): %w", r.node, r.cfg.Master, err)
	}
	if err := r.post(ctx, n, rep); err != nil {
		return nodePlan{}, lost(err)
	}
	deadline := time.Now().Add(r.e.JoinTimeout + r.e.RejoinTimeout + time.Minute)
	for {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := r.store.Get(c, r.key(n, "plan"))
		cancel()
		if err == nil {
			var p nodePlan
			if err := json.Unmarshal(b, &p); err != nil {
				return p, fmt.Errorf("launch: node %d: node 0's plan: %w", r.node, err)
			}
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = r.store.Add(c, r.key(n, "ack"), 1)
			cancel()
			return p, nil
		}
		if ctx.Err() != nil || !errors.Is(err, rendezvous.ErrTimeout) || time.Now().After(deadline) {
			return nodePlan{}, lost(err)
		}
	}
}

func intsText(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func droppedText(ds []DroppedNode) string {
	if len(ds) == 0 {
		return "no node dropped"
	}
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("node %d dropped (%s)", d.Node, d.Reason)
	}
	return strings.Join(s, ", ")
}

func droppedSuffix(ds []DroppedNode) string {
	if len(ds) == 0 {
		return ""
	}
	return "; " + droppedText(ds)
}
