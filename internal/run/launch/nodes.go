package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
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
