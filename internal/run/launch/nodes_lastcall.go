package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// The last call (-nnodes MIN:MAX, MIN < MAX, with Elastic.LastCall > 0),
// as torchrun's c10d rendezvous keeps one (its last_call_timeout): once
// the nodes the job needs have joined, node 0 waits a while more for the
// others, so that nodes started together with the job are in its first
// generation instead of joining it while it runs, which pauses the
// members for a heal (nodes_scaleup.go). Vocabulary: the start's nodes
// are 0..MIN-1; the window's nodes are MIN..MAX-1; the window opens once
// every start node has joined (nodes_join.go) and closes after LastCall,
// or at once when every window node is in or left out. The steps:
//
//  1. a window node's launcher, the first to claim its -node-rank
//     (claimNode: rejoinState.fresh), posts a join report as a start node
//     does (attempt 0's node/<i>) and waits for node 0's first plan;
//  2. node 0, once the window opens, reads the window nodes' join
//     reports as they come (those posted earlier at once) until it
//     closes. A node whose report disagrees with node 0's (another -ranks
//     or -nnodes, an unreachable -master: the checks a start node's
//     report gets, disagreement) or that would make the job too big to
//     split the global batch over (Elastic.Fits) is left out, and the
//     first plan names it among its dropped nodes, with why;
//  3. at the close node 0 asks every node in for a sign of life: its
//     launcher's heartbeat counter (nodes_lost.go) must move after the
//     close, within lastCallBeats heartbeats. A window node whose counter
//     does not is left out (its launcher died during the window) without
//     being told; a start node whose counter does not ends the job,
//     naming it (the job cannot start without it);
//  4. node 0 starts the first attempt on the start nodes and the window
//     nodes in, by -node-rank (ranks numbered node by node, as always):
//     the global batch is split over all their ranks;
//  5. a window node that finds itself among the plan's members runs as any
//     member does; one the plan names as dropped ends with why; any other
//     (it came after the close, or node 0 heard no sign of life from it)
//     asks node 0 to take it into the running job (scale up).
//
// A second launcher claiming a window node, and any launcher started for
// one after the first, asks to join the running job directly (as one
// does when a job has no last call).

// DefaultLastCall is cmd/train's -last-call, torchrun's default
// last_call_timeout.
const DefaultLastCall = 30 * time.Second

// lastCallBeats is how many heartbeats after the close node 0 waits for
// a sign of life from each node in (step 3): a live launcher beats every
// one.
const lastCallBeats = 4

// windowNodes are the last call's nodes, MIN..MAX-1: none when the job
// does not grow or has no last call.
func (r *nodeRdzv) windowNodes() []int {
	if r.e == nil || r.e.LastCall <= 0 {
		return nil
	}
	var out []int
	for n := r.cfg.Nnodes; n < r.cfg.mostNodes(); n++ {
		out = append(out, n)
	}
	return out
}

// callState is node 0's record of the last call: the window's nodes,
// those in, and those left out, with why.
type callState struct {
	want []int
	in   []int
	out  []DroppedNode
}

// settled reports whether every window node is in or left out: the
// window closes at once.
func (c *callState) settled() bool { return len(c.in)+len(c.out) >= len(c.want) }

// take records node: in when why is "", else left out for why.
func (c *callState) take(node int, why string) {
	if why == "" {
		c.in = append(c.in, node)
		return
	}
	c.out = append(c.out, DroppedNode{Node: node, Reason: why})
}

// missing are the window nodes neither in nor left out.
func (c *callState) missing() []int {
	return slices.DeleteFunc(slices.Clone(c.want), func(n int) bool {
		return slices.Contains(c.in, n) || slices.ContainsFunc(c.out, func(d DroppedNode) bool { return d.Node == n })
	})
}

// drop leaves out the nodes of c.in in dead (step 3), which are not told.
func (c *callState) drop(dead []int) {
	c.in = slices.DeleteFunc(c.in, func(n int) bool { return slices.Contains(dead, n) })
}

// lastCall is steps 2 and 3 on node 0: reps holds the start nodes' join
// reports, to which it adds those of the window nodes in. It returns the
// window nodes in, by -node-rank, and those left out with why (the
// plan's dropped nodes); an error ends the job.
func (r *nodeRdzv) lastCall(ctx context.Context, reps map[int]nodeReport) ([]int, []DroppedNode, error) {
	c := &callState{want: r.windowNodes()}
	if len(c.want) == 0 {
		return nil, nil, nil
	}
	start, window := time.Now(), r.e.LastCall
	fmt.Fprintf(r.w.errOut, "launch: node 0: the job's start (-nnodes %s) is in; last call for %s: the job starts in %v, or once they are all in (-last-call)\n",
		nodesWords(r.cfg.Nnodes, r.cfg.MaxNodes), listText("node", c.want), window)
	if err := r.callWindow(ctx, c, reps); err != nil {
		return nil, nil, err
	}
	why := "all are in"
	if m := c.missing(); len(m) > 0 {
		why = fmt.Sprintf("%s did not join in time; a launcher started for one later joins the running job", listText("node", m))
	}
	nodes := make([]int, 0, len(reps))
	for n := range reps {
		nodes = append(nodes, n)
	}
	dead := r.unconfirmed(ctx, nodes)
	if i := slices.IndexFunc(dead, func(n int) bool { return n < r.cfg.Nnodes }); i >= 0 {
		return nil, nil, fmt.Errorf("launch: node 0: node %d joined, but its launcher stopped answering during the last call (no heartbeat within %v of its close): the job cannot start without nodes 0..%d",
			dead[i], lastCallBeats*r.cfg.heartbeat, r.cfg.Nnodes-1)
	}
	for _, n := range dead {
		delete(reps, n)
		fmt.Fprintf(r.w.errOut, "launch: node 0: node %d joined in the last call, but its launcher stopped answering (no heartbeat within %v of its close): the job starts without it\n",
			n, lastCallBeats*r.cfg.heartbeat)
	}
	c.drop(dead)
	slices.Sort(c.in)
	fmt.Fprintf(r.w.errOut, "launch: node 0: the last call closed after %v (%s): the job starts on %s\n",
		time.Since(start).Round(time.Millisecond), why, Count(r.cfg.Nnodes+len(c.in), "node"))
	return c.in, c.out, nil
}

// callWindow is step 2: it reads the window nodes' join reports into c
// (those in into reps) until every one is in or left out, or LastCall
// has passed since it began.
func (r *nodeRdzv) callWindow(ctx context.Context, c *callState, reps map[int]nodeReport) error {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, r.e.LastCall)
	defer cancel()
	ch := make(chan arrival, len(c.want))
	for _, node := range c.want {
		go func() {
			for {
				rep, err := r.readReport(wctx, 0, node)
				if errors.Is(err, rendezvous.ErrTimeout) && wctx.Err() == nil {
					continue // the store's own limit, before the window's
				}
				ch <- arrival{node: node, rep: rep, err: err}
				return
			}
		}()
	}
	tick := time.NewTicker(r.cfg.joinReport)
	defer tick.Stop()
	for !c.settled() {
		select {
		case a := <-ch:
			if a.err != nil && wctx.Err() != nil {
				continue // the window closed: the select's last case says so
			}
			why := r.callRefusal(a, reps)
			c.take(a.node, why)
			if why != "" {
				fmt.Fprintf(r.w.errOut, "launch: node 0: node %d is left out of the job: %s\n", a.node, why)
				continue
			}
			reps[a.node] = a.rep
			fmt.Fprintf(r.w.errOut, "launch: node 0: node %d joined in the last call (%d of at most %d nodes)\n", a.node, len(reps)+1, r.cfg.mostNodes())
		case <-tick.C:
			fmt.Fprintf(r.w.errOut, "launch: node 0: last call: still waiting for %s (%v of %v)\n",
				listText("node", c.missing()), time.Since(start).Round(time.Second), r.e.LastCall)
		case <-wctx.Done():
			return ctx.Err() // nil when the window ran out
		}
	}
	return nil
}

// callRefusal is why node 0 leaves the window node of arrival a out of
// the job (step 2), "" when it takes it: reps holds the nodes in.
func (r *nodeRdzv) callRefusal(a arrival, reps map[int]nodeReport) string {
	if a.err != nil {
		return "its join report does not check: " + a.err.Error()
	}
	if why := r.disagreement(a.node, a.rep); why != "" {
		return why
	}
	n := (len(reps) + 1 + 1) * r.cfg.Ranks // node 0, the nodes in, and this one
	if r.e.Fits != nil {
		if err := r.e.Fits(n); err != nil {
			return fmt.Sprintf("the job cannot start on %s: %v", Count(n, "rank"), err)
		}
	}
	return ""
}

// unconfirmed is step 3: of nodes, those whose heartbeat counter does not
// move within lastCallBeats heartbeats from now.
func (r *nodeRdzv) unconfirmed(ctx context.Context, nodes []int) []int {
	read := func(n int) int64 {
		c, cancel := context.WithTimeout(ctx, r.cfg.heartbeat)
		defer cancel()
		v, err := r.store.Add(c, aliveKey(n), 0)
		if err != nil {
			return -1
		}
		return v
	}
	first := map[int]int64{}
	for _, n := range nodes {
		first[n] = read(n)
	}
	beaten := func(n int) bool {
		v := read(n)
		if first[n] < 0 { // not read yet: a beat from the next reading on
			first[n] = v
			return false
		}
		return v >= 0 && v != first[n]
	}
	pending := slices.Clone(nodes)
	deadline := time.Now().Add(lastCallBeats * r.cfg.heartbeat)
	poll := max(r.cfg.heartbeat/10, time.Millisecond)
	for len(pending) > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil // the caller reports why it ended
		case <-time.After(poll):
		}
		pending = slices.DeleteFunc(pending, beaten)
	}
	slices.Sort(pending)
	return pending
}

// windowReaders is how many launchers read a last plan that ends the job
// before its first attempt: the nodes whose join reports node 0 read
// (reps), and the window nodes whose launchers claimed them but that are
// not in reps (step 1: they wait for the plan too).
func (r *nodeRdzv) windowReaders(ctx context.Context, reps map[int]nodeReport) int {
	n := len(reps)
	for _, node := range r.windowNodes() {
		if _, ok := reps[node]; ok {
			continue
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		claims, err := r.store.Add(c, claimKey(node), 0)
		cancel()
		if err == nil && claims > 0 {
			n++
		}
	}
	return n
}

// enter is how the launcher of a node beyond the start's, or of one
// rejoining, comes into the job (step 5): the first launcher of a window
// node goes to node 0's first rendezvous, and runs its first attempt if
// it is a member (a last plan too: follow ends as it says); else, and for
// every other launcher, node 0 is asked to take it in (askRejoin).
func (r *nodeRdzv) enter(ctx context.Context, sigs chan os.Signal, rep nodeReport) (nodePlan, error) {
	if !r.rj.grow || !r.rj.fresh {
		return r.askRejoin(ctx)
	}
	sctx, stopSig := signalContext(ctx, sigs)
	plan, err := r.rendezvous(sctx, 0, rep)
	if serr := stopSig(); serr != nil {
		return plan, fmt.Errorf("launch: node %d: %w", r.node, serr)
	}
	if err != nil {
		return plan, err
	}
	if plan.Done || plan.Err != "" || slices.Contains(plan.Members, r.node) {
		r.rj.rejoin, r.rj.grow = false, false
		if !plan.Done && plan.Err == "" {
			fmt.Fprintf(r.w.errOut, "launch: node %d: node 0's last call took node %d into the job's first attempt, on %s\n",
				r.node, r.node, Count(len(plan.Members), "node"))
		}
		return plan, nil
	}
	if i := slices.IndexFunc(plan.Dropped, func(d DroppedNode) bool { return d.Node == r.node }); i >= 0 {
		return plan, fmt.Errorf("launch: node %d: node 0 left node %d out of the job: %s", r.node, r.node, plan.Dropped[i].Reason)
	}
	return r.askRejoin(ctx)
}
