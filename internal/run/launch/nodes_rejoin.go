package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// A node's launcher rejoining a running job (-nnodes K -on-failure
// continue -heal; docs/elastic.md). When the job continued without a node
// (survive_nodes.go: every rank of it was removed), a launcher restarted
// for it — the same -node-rank, -master and secret — comes back so:
//
//  1. it joins node 0's launcher store as any node does; its claim of the
//     -node-rank (claimNode) finds the node claimed before, and with
//     -heal, once node 0 has marked that it takes launchers back
//     (takesBackKey, set when it runs an attempt with -heal), it asks node
//     0 to take it back instead of failing (else the claim fails at once,
//     naming why: the job continues without the node, or a second
//     launcher of one -node-rank): it takes a
//     request number (elastic/rejoin/seq) and posts, sealed, its request
//     at elastic/rejoin/<i> (its node, -ranks, run id, address);
//  2. node 0's launcher reads the requests in order while an attempt runs
//     with -heal (serveRejoins) and answers each at elastic/rejoin/<i>/answer:
//     refused, with why (a node still in the job — two launchers given one
//     -node-rank —, another -ranks, another job's run id, no room), or
//     admitted: the attempt's plan and a name for each of the node's ranks
//     (joining ranks' names, world.., as a replacement's on one host), which
//     the coordinator now waits for as joiners of that node;
//  3. the launcher starts its ranks as joining ranks (EnvJoinName) of the
//     attempt, against the ranks' store on node 0, and follows the
//     generations' plans as a member node; each rank announces itself, and
//     once all of the node's ranks have, the coordinator grows the group
//     at the next step boundary (survive_grow.go) and the members heal them
//     (parameters, optimizer state, position; striped, checksummed, the
//     replicas compared);
//  4. once the grow has taken them in, node 0 counts the node back (it
//     waits for its report after the attempt again); until then the node
//     stays gone, so that a node whose ranks die before they are taken in
//     leaves nothing to wait for. While the rejoining node's ranks are
//     joiners or members, node 0 watches its launcher's heartbeat: a node
//     lost mid-heal is a loss of its ranks like any other, and the job
//     continues without them.
//
// The launcher then takes part in the job's later attempts (restarts) as
// the node it was. A launcher given the wrong secret cannot reach node 0's
// store at all (its handshake fails, and it says so: every node needs the
// same RINGDDP_SECRET).

// EnvJobID is the job's id, which the ranks of every node other than 0
// get from node 0's plan (Elastic.JobID).
const EnvJobID = "RINGDDP_JOB_ID"

// attemptEnv is what the ranks of plan's attempt get besides the job's
// variables: the attempt's number (EnvRestart), with restarts or
// survivors continuing, and node 0's job id (EnvJobID).
func (r *nodeRdzv) attemptEnv(plan nodePlan) []string {
	var env []string
	if r.e.MaxRestarts > 0 || r.e.Continue {
		env = append(env, EnvRestart+"="+strconv.Itoa(plan.Attempt))
	}
	if plan.JobID != "" {
		env = append(env, EnvJobID+"="+plan.JobID)
	}
	return env
}

// rejoinState is a node launcher's part in rejoining: on the launcher
// that rejoins, that it does and, for the attempt it rejoins, its ranks'
// names; on node 0, the next request to read.
type rejoinState struct {
	rejoin bool
	// grow: this node is a new one, joining beyond the start's nodes
	// (nodes_scaleup.go).
	grow bool
	// fresh: this launcher was the first to claim its new node, so it
	// tries node 0's last call before it asks to join (nodes_lastcall.go).
	fresh bool
	names []int
	next  int
	// left, on a node other than 0, says why the last attempt's plans
	// removed every rank of this node ("": they did not).
	left string
}

// leftError is this launcher's end once its node's ranks were all
// removed while the job continues without them.
func (r *nodeRdzv) leftError() error {
	hint := "run the job with -heal to let a restarted launcher rejoin it"
	if r.e.Heal {
		hint = "start this launcher again to rejoin it"
	}
	return fmt.Errorf("launch: node %d: every rank of this node was removed from the job, which continues without it (%s): %s",
		r.node, untrusted.Text(r.rj.left, maxShownText), hint)
}

// Keys of rejoining, in node 0's launcher store: the request counter, and
// the mark node 0 sets once it runs an attempt that takes launchers back.
const (
	rejoinSeqKey = "elastic/rejoin/seq"
	takesBackKey = "elastic/rejoin/open"
)

// takesBack reports whether node 0 runs, or ran, an attempt that takes
// launchers back (-heal): else a launcher claiming a node claimed before
// is refused at once (claimNode).
func (r *nodeRdzv) takesBack(ctx context.Context) bool {
	c, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := r.store.Get(c, takesBackKey)
	return err == nil
}

func rejoinKey(i int64) string { return "elastic/rejoin/" + strconv.FormatInt(i, 10) }

// rejoinRequest is what a launcher asking to rejoin posts.
type rejoinRequest struct {
	Node  int    `json:"node"`
	Ranks int    `json:"ranks"`
	RunID string `json:"run_id,omitempty"` // its RINGDDP_RUN_ID, if set
	Addr  string `json:"addr,omitempty"`
	Pid   int    `json:"pid"`
	// Its -nnodes MIN:MAX (nodes_scaleup.go; 0: not sent).
	Nnodes   int `json:"nnodes,omitempty"`
	MaxNodes int `json:"max_nodes,omitempty"`
}

// rejoinAnswer is node 0's answer: Refused says why not; else the
// attempt's plan and the node's ranks' names.
type rejoinAnswer struct {
	Refused string   `json:"refused,omitempty"`
	Plan    nodePlan `json:"plan"`
	Names   []int    `json:"names,omitempty"`
}

// askRejoin (a launcher whose node was claimed before, with -heal) posts
// its request and returns node 0's admission: the plan of the attempt it
// joins, its ranks' names kept in r.rj.names.
func (r *nodeRdzv) askRejoin(ctx context.Context) (nodePlan, error) {
	fail := func(err error) (nodePlan, error) {
		if r.rj.grow {
			return nodePlan{}, fmt.Errorf("launch: node %d: joining the running job: %w", r.node, err)
		}
		return nodePlan{}, fmt.Errorf("launch: node %d: rejoining the running job: %w", r.node, err)
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	i, err := r.store.Add(c, rejoinSeqKey, 1)
	cancel()
	if err != nil {
		return fail(err)
	}
	req := rejoinRequest{Node: r.node, Ranks: r.cfg.Ranks, RunID: r.cfg.Getenv(EnvRunID), Addr: nodeAddr(r.cfg.Master), Pid: os.Getpid(),
		Nnodes: r.cfg.Nnodes, MaxNodes: r.cfg.mostNodes()}
	if err := r.setSealed(ctx, rejoinKey(i), req); err != nil {
		return fail(err)
	}
	if r.rj.grow {
		fmt.Fprintf(r.w.errOut, "launch: node %d: asking node 0 to take node %d into the running job (-nnodes %s; request %d)\n", r.node, r.node, nodesWords(r.cfg.Nnodes, r.cfg.MaxNodes), i)
	} else {
		fmt.Fprintf(r.w.errOut, "launch: node %d: node %d was in the job before: asking node 0 to take it back (request %d)\n", r.node, r.node, i)
	}
	wait, cancel := context.WithTimeout(ctx, r.e.JoinTimeout)
	defer cancel()
	var ans rejoinAnswer
	for {
		err = r.getSealed(wait, rejoinKey(i)+"/answer", &ans)
		if !errors.Is(err, rendezvous.ErrTimeout) || wait.Err() != nil {
			break
		}
	}
	switch {
	case err != nil && wait.Err() != nil && ctx.Err() == nil:
		return fail(fmt.Errorf("node 0 did not answer within %v (is the job run with -on-failure continue -heal on node 0?)", r.e.JoinTimeout))
	case err != nil:
		return fail(err)
	case ans.Refused != "":
		return fail(fmt.Errorf("node 0 refused: %s", untrusted.Text(ans.Refused, maxShownText)))
	}
	if err := r.checkAnswer(&ans); err != nil {
		return fail(fmt.Errorf("node 0's answer does not check: %w", err))
	}
	r.rj.names = ans.Names
	verb := "takes it back"
	if r.rj.grow {
		verb = "takes it"
	}
	fmt.Fprintf(r.w.errOut, "launch: node %d: node 0 %s into attempt %d: its ranks join as %s and heal from the others at a step boundary\n",
		r.node, verb, ans.Plan.Attempt+1, ranksText(ans.Names))
	return ans.Plan, nil
}

// checkAnswer checks an admission: a plan of this node's job naming this
// node, and one joining rank's name for each of its ranks.
func (r *nodeRdzv) checkAnswer(ans *rejoinAnswer) error {
	p := &ans.Plan
	if p.Attempt < 0 || p.Done || p.Err != "" {
		return fmt.Errorf("attempt %d (done %v, err %q): not a running attempt", p.Attempt, p.Done, untrusted.Text(p.Err, 80))
	}
	if err := checkPlan(p, p.Attempt, r.cfg.mostNodes(), r.cfg.Ranks); err != nil {
		return err
	}
	world := len(p.Members) * p.RanksPerNode
	switch {
	case !r.rj.grow && !slices.Contains(p.Members, r.node):
		return fmt.Errorf("its plan's nodes %v do not include node %d", p.Members, r.node)
	case len(ans.Names) != r.cfg.Ranks:
		return fmt.Errorf("%d names for %d ranks", len(ans.Names), r.cfg.Ranks)
	}
	for i, n := range ans.Names {
		if n < world || n >= world+maxJoiners || slices.Index(ans.Names, n) != i {
			return fmt.Errorf("name %d: want a joining rank's, %d..%d, once", n, world, world+maxJoiners-1)
		}
	}
	return nil
}

// serveRejoins, on node 0 while attempt plan runs with -heal, reads the
// requests to rejoin in order and answers each (admitRejoin).
func (r *nodeRdzv) serveRejoins(ctx context.Context, s *survival, plan nodePlan, wg *sync.WaitGroup) {
	if err := r.store.Set(ctx, takesBackKey, []byte("1")); err != nil {
		return
	}
	for ctx.Err() == nil {
		i := int64(r.rj.next + 1)
		b, err := r.store.Get(ctx, rejoinKey(i))
		if errors.Is(err, rendezvous.ErrTimeout) {
			continue
		}
		if err != nil {
			return
		}
		r.rj.next++
		var req rejoinRequest
		var ans rejoinAnswer
		if err := r.seal.decode(rejoinKey(i), b, &req); err != nil {
			ans.Refused = "its request does not check: " + err.Error()
			fmt.Fprintf(r.w.errOut, "launch: node 0: refused request %d to rejoin: %s\n", i, ans.Refused)
		} else {
			ans = r.admitRejoin(ctx, s, plan, req, wg)
		}
		if err := r.setSealed(ctx, rejoinKey(i)+"/answer", ans); err != nil && ctx.Err() == nil {
			fmt.Fprintf(r.w.errOut, "launch: node 0: answering node %d's request to rejoin: %v\n", req.Node, err)
		}
	}
}

// admitRejoin decides req, a request to rejoin attempt plan: the node must
// be one of the attempt's that left the job, with the job's -ranks and run
// id, and the group must have room for its ranks.
func (r *nodeRdzv) admitRejoin(ctx context.Context, s *survival, plan nodePlan, req rejoinRequest, wg *sync.WaitGroup) rejoinAnswer {
	node := req.Node
	who := fmt.Sprintf("node %d's launcher (pid %d", node, req.Pid)
	if req.Addr != "" {
		who += " on " + untrusted.Text(req.Addr, maxAddrLen)
	}
	who += ")"
	baseID := strings.TrimSuffix(plan.RunID, "-restart"+strconv.Itoa(plan.Attempt))
	r.goneMu.Lock()
	left := r.gone[node]
	r.goneMu.Unlock()
	var why string
	grow := !slices.Contains(plan.Members, node) // a new node (nodes_scaleup.go)
	switch {
	case node == 0:
		why = "node 0's launcher leads the job: it cannot rejoin it"
	case req.Ranks != plan.RanksPerNode:
		why = fmt.Sprintf("it runs -ranks %d; the job's nodes run %d", req.Ranks, plan.RanksPerNode)
	case req.RunID != "" && req.RunID != baseID:
		why = fmt.Sprintf("its %s is %q, but this job runs as %q: another job's launcher?", EnvRunID, untrusted.Text(req.RunID, maxRunIDLen), baseID)
	case grow:
		why = r.growRefusal(s, req)
	case left == "":
		why = fmt.Sprintf("node %d is in the job: node 0 has not seen it leave (were two launchers given -node-rank %d? if its launcher was lost only just now, start it again once node 0 says the job continues without it)", node, node)
	}
	if why == "" {
		reason, verb := fmt.Sprintf("node %d rejoins (it had left: %s)", node, left), "rejoins"
		if grow {
			reason, verb = r.growWhy(node), "joins the running job (scale up)"
		}
		names, err := s.addRemote(ctx, wg, node, req.Ranks, reason)
		if err == nil {
			fmt.Fprintf(r.w.errOut, "launch: node 0: %s %s: its ranks join as %s at the next step boundary once all are ready\n", who, verb, ranksText(names))
			wg.Go(func() {
				r.watchRejoined(ctx, s, node)
				r.notPending(node) // lost before it was taken in (else a no-op)
			})
			return rejoinAnswer{Plan: plan, Names: names}
		}
		r.notPending(node)
		why = err.Error()
	}
	fmt.Fprintf(r.w.errOut, "launch: node 0: refused %s %s: %s\n", who, map[bool]string{false: "rejoining", true: "joining the running job"}[grow], why)
	return rejoinAnswer{Refused: why}
}

// watchRejoined, on node 0, watches the heartbeat of node, which rejoined
// during the attempt, until ctx ends: once it stops, each of the node's
// ranks is lost (a joiner forgotten, a member removed), so that a node
// lost while it heals never leaves the members waiting for it.
func (r *nodeRdzv) watchRejoined(ctx context.Context, s *survival, node int) {
	lost := make(chan struct{})
	stop := r.watchAlive(ctx, node, func() { close(lost) })
	select {
	case <-ctx.Done():
		stop()
		return
	case <-lost:
	}
	stop()
	reason := fmt.Errorf("was lost with its node's launcher (no heartbeat for %v)", r.cfg.heartbeatLost)
	for _, name := range s.place.ranksOf(node) {
		s.absorb(&ExitError{Rank: name, Pid: s.pidOf(name), Err: reason})
	}
}

// noteBack, on node 0, counts node back in the job: its ranks names were
// taken in (nothing, when it had not left).
func (r *nodeRdzv) noteBack(node int, names []int) {
	r.goneMu.Lock()
	_, was := r.gone[node]
	delete(r.gone, node)
	r.goneMu.Unlock()
	added := r.takenIn(node)
	if !was && !added {
		return // a replacement on a node in the job (nodes_replace.go)
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.store.Set(c, goneKey(node), nil)
	if added {
		fmt.Fprintf(r.w.errOut, "launch: node 0: node %d is in the job now with %s (scale up)\n", node, ranksText(names))
		return
	}
	fmt.Fprintf(r.w.errOut, "launch: node 0: node %d is back in the job with %s\n", node, ranksText(names))
}
