package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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
//     ended. A node that has not reported by then is dropped, and so is
//     one whose launcher stopped beating meanwhile (nodes_lost.go). Node 0 then
//     decides (restartPolicy, restart.go): done (every rank of every node that reported exited 0, and
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
	// Joining: its -nnodes and -master, and whether -master names a
	// loopback address on this node, which node 0 checks against its own.
	Nnodes         int    `json:"nnodes,omitempty"`
	MaxNodes       int    `json:"max_nodes,omitempty"` // MAX of -nnodes MIN:MAX (nodes_scaleup.go)
	Master         string `json:"master,omitempty"`
	MasterLoopback bool   `json:"master_loopback,omitempty"`
	// Addr, joining: the node's host name and the address it reaches
	// -master from (nodeAddr), which node 0 names when the node is lost.
	Addr string `json:"addr,omitempty"`
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
	JobID        string        `json:"job_id,omitempty"` // Elastic.JobID of node 0 (nodes_rejoin.go)
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
	seal  sealer // MACs the values the launchers exchange (nodes_seal.go)
	node  int    // this node's -node-rank at the start
	host  string // the master's host
	port  int    // the master's port

	// Node 0: its leader key, and whether -master's host is not one of
	// this host's addresses (nodes_join.go).
	leader       leaderInfo
	masterRemote bool
	// addrs, node 0: every node's address, from its join report.
	addrs map[int]string

	// With survivors continuing (survive_nodes.go): the failures survived
	// over the job, and on node 0 the nodes that left it meanwhile, with
	// why.
	survived int
	goneMu   sync.Mutex
	gone     map[int]string
	// lost, on a node other than 0, ends its launcher with node 0's loss
	// (the heartbeat's, and the survivors' sooner: survive_nodes.go).
	lost context.CancelCauseFunc
	// rj: rejoining a running job (nodes_rejoin.go); sc, node 0: new
	// nodes joining it (nodes_scaleup.go).
	rj rejoinState
	sc scaleState
}

// key is attempt n's key k.
func (r *nodeRdzv) key(n int, k string) string { return "elastic/" + strconv.Itoa(n) + "/" + k }

// runNodes runs a job of several nodes (see above): the launchers meet
// (nodes_join.go), then run the attempts.
func runNodes(ctx context.Context, cfg Config, w outputs, sigs chan os.Signal) error {
	host, port, err := splitMaster(cfg.Master)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	secret := cfg.Getenv(EnvSecret)
	if !cfg.Insecure && secret == "" {
		return fmt.Errorf("launch: %w", errNoSharedSecret)
	}
	r := &nodeRdzv{cfg: cfg, e: cfg.Elastic, w: w, node: cfg.NodeRank, host: host, port: port, seal: newSealer(secret)}
	scfg := rendezvous.StoreConfig{Secret: []byte(secret), Insecure: cfg.Insecure, Timeout: r.e.JoinTimeout}
	sctx, stop := signalContext(ctx, sigs)
	if cfg.NodeRank == 0 {
		err = r.host0(sctx, scfg)
	} else {
		err = r.dialLeader(sctx, scfg)
	}
	if serr := stop(); serr != nil {
		if r.store != nil {
			r.store.Close()
		}
		return fmt.Errorf("launch: node %d: %w", cfg.NodeRank, serr)
	}
	if err != nil {
		return err
	}
	defer r.store.Close()
	if cfg.NodeRank == 0 {
		return r.lead(ctx, sigs)
	}
	// The heartbeat ends this launcher's context when node 0 stops
	// answering it (nodes_lost.go).
	fctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	r.lost = lost
	go r.heartbeat(fctx, lost)
	return r.follow(fctx, sigs)
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

// publish sets attempt n's plan.
func (r *nodeRdzv) publish(ctx context.Context, p nodePlan) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	k := r.key(p.Attempt, "plan")
	if err := r.store.Set(ctx, k, r.seal.seal(k, b)); err != nil {
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
// want; it returns those that came, and the nodes whose launchers stopped
// beating meanwhile (nodes_lost.go), each with the reason.
func (r *nodeRdzv) gather(ctx context.Context, n int, want []int, deadline time.Time) (map[int]nodeReport, map[int]string) {
	got, silent := map[int]nodeReport{}, map[int]string{}
	for _, node := range want {
		c, cancel := context.WithDeadline(ctx, deadline)
		stop := r.watchAlive(c, node, cancel)
		rep, err := r.readReport(c, n, node)
		lost := stop()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return got, silent
			}
			if lost {
				silent[node] = fmt.Sprintf("its launcher stopped answering (no heartbeat for %v)", r.cfg.heartbeatLost)
			} else if !errors.Is(err, rendezvous.ErrTimeout) {
				fmt.Fprintf(r.w.errOut, "launch: node 0: %v\n", err)
			}
			continue
		}
		got[node] = rep
	}
	return got, silent
}

// readReport waits for node's report for rendezvous n and checks it.
func (r *nodeRdzv) readReport(ctx context.Context, n, node int) (nodeReport, error) {
	k := r.key(n, "node/"+strconv.Itoa(node))
	var rep nodeReport
	b, err := r.store.Get(ctx, k)
	if err == nil {
		rep, err = decodeReport(r.seal, k, b, node, n-1)
	}
	if err != nil && !errors.Is(err, rendezvous.ErrTimeout) && ctx.Err() == nil {
		return rep, fmt.Errorf("node %d's report (%s): %w", node, k, err)
	}
	return rep, err
}

// post sets this node's report for rendezvous n.
func (r *nodeRdzv) post(ctx context.Context, n int, rep nodeReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	k := r.key(n, "node/"+strconv.Itoa(r.node))
	return r.store.Set(c, k, r.seal.seal(k, b))
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
	start := time.Now()
	deadline := start.Add(r.e.JoinTimeout + r.e.RejoinTimeout + r.e.LastCall + time.Minute)
	k := r.key(n, "plan")
	for {
		c, cancel := context.WithTimeout(ctx, r.cfg.joinReport)
		b, err := r.store.Get(c, k)
		cancel()
		if err == nil {
			p, err := decodePlan(r.seal, k, b, n, r.cfg.mostNodes(), r.cfg.Ranks)
			if err != nil {
				return p, fmt.Errorf("launch: node %d: refusing node 0's plan for attempt %d (%s): %w", r.node, n+1, k, err)
			}
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = r.store.Add(c, r.key(n, "ack"), 1)
			cancel()
			return p, nil
		}
		if ctx.Err() != nil || !errors.Is(err, rendezvous.ErrTimeout) || time.Now().After(deadline) {
			return nodePlan{}, lost(err)
		}
		fmt.Fprintf(r.w.errOut, "launch: node %d: still waiting for node 0's plan for attempt %d (%v so far; node 0 waits for the other nodes)\n",
			r.node, n+1, time.Since(start).Round(time.Second))
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
