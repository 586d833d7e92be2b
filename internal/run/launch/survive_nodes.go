package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// Survivors continue across node launchers (-nnodes K -on-failure
// continue; docs/elastic.md). Node 0's launcher hosts the ranks' store on
// the port it binds for the attempt (as rank 0's store without continue)
// and runs the one coordinator of the job (survive_lead.go) over every
// node's ranks; the other nodes' launchers are its members:
//
//  1. a rank of node K>0 that exits is reported by its launcher at the
//     exit key of the attempt's run id in that store (exitKey); node 0's
//     launcher reads each remote rank's key and hands the exit to the
//     coordinator as its own ranks' exits, which sets the generation's
//     fault so that every survivor aborts at once;
//  2. a node lost whole — its launcher and ranks killed, its host down —
//     reports nothing: its ranks' peers fail their collectives, report the
//     fault, and its ranks do not check in within Elastic.CheckIn, so they
//     drop out together, in one generation; each lost rank's reason names
//     its node (placeLost);
//  3. node K's launcher follows the generations' plans (followPlans): its
//     own members are the plan's ranks of node K (so that it stops its
//     removed ranks once its members have ended), and a plan that falls
//     back to a restart fails its attempt, as on node 0, so that the
//     nodes' restart policy takes over together;
//  4. after the attempt, node 0 no longer waits for a node whose ranks
//     were all removed (withoutGone); and it notes the node at goneKey in
//     its launcher's store. With -heal a launcher restarted for that node
//     rejoins the running job (nodes_rejoin.go); without, it is told why
//     it cannot come back (claimNode). A member launcher whose ranks were
//     all removed while it lives ends, naming why (leftError).
//
// Node 0's launcher stays a single point of failure: it hosts both stores
// and decides every plan. When it dies, a member launcher's plan watch
// sees the ranks' store close and, once node 0's launcher store does not
// answer either, ends naming node 0 (checkNode0); the heartbeat
// (nodes_lost.go) would end it within Config.heartbeatLost otherwise.

// exitKey is where node K's launcher reports rank's exit in the ranks'
// store of the attempt runID.
func exitKey(runID string, rank int) string {
	return "ringddp/elastic/" + runID + "/exit/" + strconv.Itoa(rank)
}

// pidKey is where node K's launcher publishes rank's pid, which node 0
// names when the rank is lost.
func pidKey(runID string, rank int) string {
	return "ringddp/elastic/" + runID + "/pid/" + strconv.Itoa(rank)
}

// goneKey, in node 0's launcher store, says that node left the job while
// it continued without it.
func goneKey(node int) string { return "elastic/gone/" + strconv.Itoa(node) }

// remoteExit is a rank's exit as its node's launcher reports it.
type remoteExit struct {
	Pid    int    `json:"pid"`
	Reason string `json:"reason"`
}

// nodePlace places the attempt's ranks on its nodes: rank r runs on
// Members[r/PerNode] (by -node-rank at the start), and a rank started to
// join on the node whose launcher started it (the ranks of a node that
// rejoined, nodes_rejoin.go, which setNames records; a replacement beside
// a live node's ranks, nodes_replace.go, which addNames adds).
type nodePlace struct {
	members []int
	perNode int
	most    int            // the most nodes the job may run on (-nnodes MIN:MAX's MAX; nodes_scaleup.go)
	addrs   map[int]string // node 0: the nodes' addresses from their join reports
	gone    func(node int, reason string)
	// back, on node 0, is told that node's ranks named names were taken
	// into the job (a node rejoining).
	back func(node int, names []int)
	// left, on another node, is told once a plan has removed every rank
	// of this node (the job continues without it), with why.
	left func(reason string)
	// joining, on a node rejoining, holds until a plan takes its ranks in.
	joining atomic.Bool
	// replace, on node 0 with healing, asks the launchers of the nodes of
	// lost ranks still in the job to replace them (nodes_replace.go).
	replace func(lost []LostRank)

	mu    sync.Mutex
	names map[int][]int // a node's ranks, when it rejoined: their names
	of    map[int]int   // a joining rank's node, by its name
}

// nodeOf is the node rank runs on (-1: unknown).
func (p *nodePlace) nodeOf(rank int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.of[rank]; ok {
		return n
	}
	if rank < 0 || rank >= len(p.members)*p.perNode {
		return -1
	}
	return p.members[rank/p.perNode]
}

// ranksOf is node's ranks in the attempt: those it started with, or since
// it rejoined those it rejoined with.
func (p *nodePlace) ranksOf(node int) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if names, ok := p.names[node]; ok {
		return slices.Clone(names)
	}
	idx := slices.Index(p.members, node)
	if idx < 0 {
		return nil
	}
	out := make([]int, p.perNode)
	for k := range out {
		out[k] = idx*p.perNode + k
	}
	return out
}

// setNames records that node's ranks are now the joining ranks names.
func (p *nodePlace) setNames(node int, names []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.names == nil {
		p.names, p.of = map[int][]int{}, map[int]int{}
	}
	p.names[node] = slices.Clone(names)
	for _, n := range names {
		p.of[n] = node
	}
}

// nodes are the attempt's nodes: its members, then any that joined it.
func (p *nodePlace) nodes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.members)
	for n := range p.names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// placeLost names each lost rank's node in its reason (the coordinator
// calls it before it reports the loss). One host: nothing.
func (s *survival) placeLost(lost []LostRank) {
	p := s.place
	if p == nil {
		return
	}
	for i, l := range lost {
		node := p.nodeOf(l.Rank)
		if node < 0 {
			continue
		}
		where := " on node " + strconv.Itoa(node)
		if a := p.addrs[node]; a != "" {
			where += " (" + a + ")"
		}
		lost[i].Reason += where
	}
}

// nodesGone tells nodePlace.gone of each node other than 0 whose ranks
// are all removed now that lost are (the coordinator calls it once the
// job continues without them).
func (s *survival) nodesGone(lost []LostRank) {
	p := s.place
	if p == nil || p.gone == nil || len(lost) == 0 {
		return
	}
	s.mu.Lock()
	members := slices.Clone(s.members) // the new generation's
	s.mu.Unlock()
	for _, node := range p.nodes() {
		ranks := p.ranksOf(node)
		hit := slices.ContainsFunc(lost, func(l LostRank) bool { return slices.Contains(ranks, l.Rank) })
		// A replacement still waiting to join (nodes_replace.go) does not
		// keep its node in the job.
		if node != 0 && hit && !slices.ContainsFunc(ranks, func(r int) bool { return slices.Contains(members, r) }) {
			p.gone(node, "every rank of it was removed: "+ranksText(ranks))
		}
	}
}

// nodeSurvival sets a's survivors up on this node for plan's attempt (idx
// this node's place in it): node 0 coordinates, the others follow. The
// returned start begins, once the ranks have started, what the node does
// during the attempt; end stops it (after the job's wait).
func (r *nodeRdzv) nodeSurvival(ctx context.Context, a *attempt, plan nodePlan, idx int) (start func(), end func(), err error) {
	place := &nodePlace{members: plan.Members, perNode: plan.RanksPerNode, most: r.cfg.mostNodes(), addrs: r.addrs}
	s := &survival{e: r.e, w: r.w.out, errOut: r.w.errOut, counted: &r.survived, place: place}
	a.survive = s
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if r.node == 0 {
		var rp *replacements
		place.gone = func(node int, reason string) {
			r.noteGone(node, reason)
			s.forgetJoinersOf(node)
		}
		if r.e.Heal {
			rp = newReplacements(sctx, &wg)
			place.replace = func(lost []LostRank) { r.replaceRemote(s, rp, lost) }
		}
		place.back = func(node int, names []int) { r.noteBack(node, names) }
		start = func() {
			// serve ran in startAttempt: the store and run id are set.
			for rank := range len(plan.Members) * plan.RanksPerNode {
				if place.nodeOf(rank) != 0 {
					s.watchRemote(sctx, &wg, rank)
				}
			}
			if r.e.Heal {
				wg.Go(func() { r.serveRejoins(sctx, s, plan, &wg) })
			}
		}
		return start, func() { cancel(); rp.close(); wg.Wait() }, nil
	}
	// A member: its ranks' exits go to node 0's store; its members follow
	// node 0's plans.
	world := len(plan.Members) * plan.RanksPerNode
	host, _, _ := net.SplitHostPort(r.cfg.Master)
	// The ranks' store takes the ranks' secret (jobVars), which is also
	// all a member launcher's reports there carry: they count no more
	// than a rank's own fault report does.
	var secret []byte
	if !r.cfg.Insecure {
		secret = []byte(rankSecret(string(r.storeSecret())))
	}
	scfg := rendezvous.StoreConfig{Secret: secret, Insecure: r.cfg.Insecure, Timeout: r.e.JoinTimeout}
	store, err := rendezvous.DialStore(sctx, net.JoinHostPort(host, strconv.Itoa(plan.StorePort)), scfg)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("launch: node %d: the job's store on node 0: %w", r.node, err)
	}
	s.store, s.runID, s.world = store, plan.RunID, world
	if r.rj.names != nil { // rejoining: its ranks are joiners (nodes_rejoin.go)
		place.setNames(r.node, r.rj.names)
	}
	r.rj.left = ""
	var leftOnce sync.Once
	place.left = func(reason string) { leftOnce.Do(func() { r.rj.left = reason }) }
	s.members = place.ranksOf(r.node)
	s.revoked, s.pids = map[int]bool{}, map[int]int{}
	s.exits, s.fallback = make(chan *ExitError, world), make(chan *ExitError, 1)
	s.storeLost = func(err error) { r.checkNode0(ctx, err) }
	start = func() {
		s.mu.Lock()
		pids := maps.Clone(s.pids)
		s.mu.Unlock()
		for rank, pid := range pids {
			_ = store.Set(sctx, pidKey(s.runID, rank), []byte(strconv.Itoa(pid)))
		}
		wg.Go(func() { s.forwardExits(sctx) })
		place.joining.Store(r.rj.names != nil)
		wg.Go(func() { s.followPlans(sctx, r.node) })
		if r.e.Heal {
			wg.Go(func() { s.serveReplace(sctx, r.node) })
		}
	}
	return start, func() { cancel(); wg.Wait(); _ = store.Close() }, nil
}

// hostStore, with survivors continuing, serves the ranks' store on
// *storeLn (the host of rank 0's socket: one host's launcher, node 0's)
// and coordinates every node's ranks there, taking the socket; it tells
// the ranks (vars) that they are survivors and returns the current
// generation's rank 0, which the output forwarding reads. s nil: nothing.
func (s *survival) hostStore(storeLn **os.File, vars *[]string, cfg Config) (*atomic.Int64, error) {
	if s == nil {
		return nil, nil
	}
	if *storeLn != nil {
		err := s.serve(*storeLn, *vars, cfg.Insecure, cfg.Ranks*max(cfg.Nnodes, 1))
		*storeLn = nil
		if err != nil {
			return nil, err
		}
	}
	*vars = append(*vars, EnvOnFailure+"="+OnFailureContinue)
	return &s.lead, nil
}

// watchRemote, on node 0, watches another node's rank: its exit report
// and its pid (watchRemoteExit, watchRemotePid), under wg.
func (s *survival) watchRemote(ctx context.Context, wg *sync.WaitGroup, rank int) {
	wg.Go(func() { s.watchRemoteExit(ctx, rank) })
	wg.Go(func() { s.watchRemotePid(ctx, rank) })
}

// watchRemoteExit, on node 0, waits for rank's exit report from its
// node's launcher and hands it to the coordinator.
func (s *survival) watchRemoteExit(ctx context.Context, rank int) {
	for ctx.Err() == nil {
		b, err := s.store.Get(ctx, exitKey(s.runID, rank))
		if errors.Is(err, rendezvous.ErrTimeout) {
			continue
		}
		if err != nil {
			return
		}
		var x remoteExit
		if len(b) > maxShownText*4 || json.Unmarshal(b, &x) != nil {
			x = remoteExit{Reason: "exited (its launcher's report does not parse)"}
		}
		reason := untrusted.Text(x.Reason, maxShownText)
		s.absorb(&ExitError{Rank: rank, Pid: x.Pid, Err: errors.New(reason)})
		return
	}
}

// watchRemotePid, on node 0, records rank's pid as its node's launcher
// publishes it, which node 0 names should the rank be lost silently.
func (s *survival) watchRemotePid(ctx context.Context, rank int) {
	for ctx.Err() == nil {
		b, err := s.store.Get(ctx, pidKey(s.runID, rank))
		if errors.Is(err, rendezvous.ErrTimeout) {
			continue
		}
		if err != nil {
			return
		}
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 {
			s.started(rank, pid)
		}
		return
	}
}

// forwardExits, on a member node, reports its ranks' exits (what absorb
// hands over) at their exit keys.
func (s *survival) forwardExits(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-s.exits:
			s.joinerGone(e)
			b, _ := json.Marshal(remoteExit{Pid: e.Pid, Reason: e.Reason()})
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := s.store.Set(c, exitKey(s.runID, e.Rank), b); err != nil && ctx.Err() == nil {
				fmt.Fprintf(s.errOut, "launch: telling node 0 that rank %d %s: %v\n", e.Rank, e.Reason(), err)
			}
			cancel()
		}
	}
}

// joinerGone, on a node rejoining, drops its rank e, which exited before
// a plan took it in (node 0 forgets it too): once none is left, the node
// has left the job again.
func (s *survival) joinerGone(e *ExitError) {
	if !s.place.joining.Load() {
		return
	}
	s.mu.Lock()
	s.revoked[e.Rank] = true
	s.members = slices.DeleteFunc(s.members, func(m int) bool { return m == e.Rank })
	none := len(s.members) == 0
	s.mu.Unlock()
	if none && s.place.left != nil {
		s.place.left(fmt.Sprintf("its ranks ended before the job took them in; rank %d %s", e.Rank, e.Reason()))
	}
}

// followPlans, on member node, reads each generation's plan: its members
// become the plan's ranks of this node, its lost ranks are revoked, and a
// plan that falls back to a restart fails the attempt. A node joining
// (its ranks started to join) keeps its ranks as members until a plan
// takes one in.
func (s *survival) followPlans(ctx context.Context, node int) {
	joining := s.place.joining.Load()
	for gen := 1; ctx.Err() == nil; {
		b, err := s.store.Get(ctx, rendezvous.GenerationKey(s.runID, gen, "plan"))
		if errors.Is(err, rendezvous.ErrTimeout) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil && s.storeLost != nil {
				s.storeLost(err)
			}
			return
		}
		p, err := decodeGenPlan(b, gen, s.world)
		if err != nil {
			fmt.Fprintf(s.errOut, "launch: node %d: %v\n", node, err)
			return
		}
		if p.Restart != "" {
			first := &ExitError{Rank: -1, Err: errors.New(p.Restart)}
			if len(p.Lost) > 0 {
				first = &ExitError{Rank: p.Lost[0].Rank, Err: errors.New(p.Lost[0].Reason)}
			}
			s.fallback <- first
			return
		}
		mine := s.place.ranksOf(node) // a replacement (nodes_replace.go) adds one
		joining = joining && !slices.ContainsFunc(mine, func(m int) bool { return p.index(m) >= 0 })
		s.place.joining.Store(joining)
		s.mu.Lock()
		if !joining {
			s.members = slices.DeleteFunc(slices.Clone(p.Members), func(m int) bool { return !slices.Contains(mine, m) })
		}
		for _, l := range p.Lost {
			s.revoked[l.Rank] = true
		}
		none := !joining && len(s.members) == 0
		s.mu.Unlock()
		if none && s.place.left != nil {
			s.place.left(p.lostReason(mine[0]))
		}
		gen++
	}
}

// noteGone, on node 0, records that node left the job while it
// continued: node 0 no longer waits for its report, and a launcher
// restarted for it is told so (claimNode).
func (r *nodeRdzv) noteGone(node int, reason string) {
	r.goneMu.Lock()
	if r.gone == nil {
		r.gone = map[int]string{}
	}
	r.gone[node] = reason
	r.goneMu.Unlock()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.store.Set(c, goneKey(node), []byte(reason))
	fmt.Fprintf(r.w.errOut, "launch: node 0: node %d left the job: %s; the job continues without node %d\n", node, reason, node)
}

// withoutGone is plan without the nodes that left the job while it
// continued: node 0 does not wait for their reports.
func (r *nodeRdzv) withoutGone(plan nodePlan) nodePlan {
	r.goneMu.Lock()
	defer r.goneMu.Unlock()
	if len(r.gone) == 0 {
		return plan
	}
	plan.Members = slices.DeleteFunc(slices.Clone(plan.Members), func(m int) bool { return m != 0 && r.gone[m] != "" })
	return plan
}

// goneRefusal is why a launcher restarted for node cannot rejoin, as node
// 0 noted it (goneKey); "" when it did not.
func (r *nodeRdzv) goneRefusal(ctx context.Context) string {
	c, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := r.store.Get(c, goneKey(r.node))
	if err != nil || len(b) == 0 { // never gone, or back (noteBack)
		return ""
	}
	return fmt.Sprintf("launch: node %d: the job continues without node %d (%s); rejoining a running job needs healing: run the job with -heal, or restart the whole job to bring the node back",
		r.node, r.node, untrusted.Text(string(b), maxShownText))
}

// generationEnv is the place of the rank named name (start: the rank as
// the job started) in a generation of members (by
// their rank at the job's start, which the launchers number node by node:
// LocalWorldSize ranks a node): its rank among them, and its local rank
// and local world among the members of its own node. nodes, when the plan
// gives them (across node launchers), is each member's node, which a
// joiner's name does not tell.
func generationEnv(start rendezvous.Env, name int, members, nodes []int) rendezvous.Env {
	env := start
	per := max(start.LocalWorldSize, 1)
	env.Rank, env.WorldSize = slices.Index(members, name), len(members)
	if len(nodes) == len(members) && env.Rank >= 0 {
		env.LocalRank, env.LocalWorldSize = 0, 0
		for i, n := range nodes {
			if n != nodes[env.Rank] {
				continue
			}
			if i < env.Rank {
				env.LocalRank++
			}
			env.LocalWorldSize++
		}
		return env
	}
	if per >= start.WorldSize { // one host: every member is local (joiners' names included)
		env.LocalRank, env.LocalWorldSize = env.Rank, env.WorldSize
		return env
	}
	env.LocalRank, env.LocalWorldSize = 0, 0
	for _, m := range members {
		if m/per != start.Rank/per {
			continue
		}
		if m < start.Rank {
			env.LocalRank++
		}
		env.LocalWorldSize++
	}
	return env
}

// removed reports whether rank was removed from the job while it
// continued (false without survivors continuing).
func (s *survival) removed(rank int) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revoked[rank]
}

// checkNode0, on a member node whose connection to the ranks' store on
// node 0 failed with err, asks node 0's launcher store whether node 0 is
// still there (it keeps it after its ranks' store closes at the end of an
// attempt); when it does not answer either, node 0's launcher is gone,
// and this launcher ends now naming it instead of after the heartbeat's
// limit.
func (r *nodeRdzv) checkNode0(ctx context.Context, err error) {
	for range 3 {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, perr := r.store.Add(c, aliveKey(r.node), 1)
		cancel()
		if perr == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.lost != nil {
		r.lost(r.node0Lost(fmt.Sprintf("its launcher stopped answering: the ranks' store it hosts failed (%v), and so did its rendezvous", err)))
	}
}
