package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// A rank lost on a live node replaced (-nnodes K -on-failure continue
// -heal; docs/elastic.md). On one host the launcher starts a joiner for a
// lost rank (survive_grow.go); across node launchers node 0 starts its
// own, and a node whose every rank was removed comes back with its
// launcher, restarted (nodes_rejoin.go). A node K>0 that lost only some of
// its ranks still runs its launcher, which replaces them so:
//
//  1. once the survivors train again after the loss (refill), node 0's
//     coordinator, for each lost rank of such a node — one with a member
//     left, not noted gone — names a joiner (world.., a name no rank had),
//     places it on the node, watches its exit and pid reports and its
//     join key as a rejoining node's ranks', and posts a replace request
//     at replaceKey(run id, K, i), i = 1, 2, ... in the ranks' store: the
//     joiner's name, the lost rank's local rank (its cores) and why;
//  2. node K's launcher reads its requests in order (serveReplace) and
//     starts each joiner as one of its ranks (its output forwarded, its
//     exit reported at exitKey as its other ranks'), publishing its pid;
//     a joiner it cannot start it reports as exited at once;
//  3. the joiner announces itself, and node 0 grows the group at the
//     next step boundary: the members heal it as on one host;
//  4. while a replacement waits or heals, node 0 watches node K's
//     heartbeat (watchRejoined): a launcher lost meanwhile is the loss of
//     its ranks, the joiner's included, so that nothing waits for a
//     process that is gone. A node whose members are all removed while
//     its replacement waits is gone (nodesGone): node 0 forgets its
//     joiners, and its launcher, which ends, may rejoin.
//
// A replacement that dies before it is taken in is reported and forgotten
// (node 0 does not ask again: the node's launcher may be failing); one
// that dies while it heals is a lost member, replaced in turn. An attempt
// names at most maxJoiners joiners. A request carries no more trust than
// the ranks' own keys in that store (its secret is theirs): node K checks
// its fields and starts at most the job's own command under a joining
// name.

// replaceKey is node's i-th replace request in the ranks' store of the
// attempt runID.
func replaceKey(runID string, node, i int) string {
	return "ringddp/elastic/" + runID + "/replace/" + strconv.Itoa(node) + "/" + strconv.Itoa(i)
}

// replaceRequest asks a node's launcher to start a joiner.
type replaceRequest struct {
	Name  int    `json:"name"`  // the joiner's name
	Local int    `json:"local"` // its local rank on the node (the lost rank's)
	Lost  int    `json:"lost"`  // the rank it replaces
	Why   string `json:"why"`
}

const maxReplaceBytes = 4 << 10

// replacements is node 0's record of the replace requests of an attempt;
// its goroutines run under wg until close.
type replacements struct {
	ctx context.Context
	wg  *sync.WaitGroup

	mu      sync.Mutex
	closed  bool         // the attempt's end waits for wg: no goroutine starts
	seq     map[int]int  // requests posted, by node
	locals  map[int]int  // each replacement's local rank, by name
	watched map[int]bool // nodes whose heartbeat node 0 watches
}

func newReplacements(ctx context.Context, wg *sync.WaitGroup) *replacements {
	return &replacements{ctx: ctx, wg: wg, seq: map[int]int{}, locals: map[int]int{}, watched: map[int]bool{}}
}

// close marks the attempt's end: no goroutine starts under wg after it.
func (rp *replacements) close() {
	if rp == nil {
		return
	}
	rp.mu.Lock()
	rp.closed = true
	rp.mu.Unlock()
}

// replaceRemote, on node 0, asks the launchers of the nodes of lost (the
// ranks removed at the last plan) that are still in the job to start a
// joiner for each (step 1 above).
func (r *nodeRdzv) replaceRemote(s *survival, rp *replacements, lost []LostRank) {
	for _, l := range lost {
		node := s.place.nodeOf(l.Rank)
		if node <= 0 || rp.ctx.Err() != nil || !r.nodeLive(s, node) {
			continue
		}
		rp.mu.Lock()
		local, ok := rp.locals[l.Rank]
		rp.mu.Unlock()
		if !ok { // a rank the node started with, or rejoined with: its place among them
			local = max(slices.Index(s.place.ranksOf(node), l.Rank), 0) % s.place.perNode
		}
		why := fmt.Sprintf("replaces rank %d, which %s", l.Rank, removedWords(l.Reason))
		name, err := s.addReplacement(node, why)
		if err != nil {
			fmt.Fprintf(r.w.errOut, "launch: node 0: not replacing rank %d on node %d: %v\n", l.Rank, node, err)
			continue
		}
		rp.mu.Lock()
		if rp.closed {
			rp.mu.Unlock()
			return
		}
		rp.locals[name] = local
		rp.seq[node]++
		i := rp.seq[node]
		s.watchRemote(rp.ctx, rp.wg, name)
		rp.wg.Go(func() { s.watchJoinKey(rp.ctx, name) })
		if !rp.watched[node] {
			rp.watched[node] = true
			rp.wg.Go(func() { r.watchRejoined(rp.ctx, s, node) })
		}
		rp.mu.Unlock()
		b, _ := json.Marshal(replaceRequest{Name: name, Local: local, Lost: l.Rank, Why: why}) // plain fields
		c, cancel := context.WithTimeout(rp.ctx, 10*time.Second)
		err = s.store.Set(c, replaceKey(s.runID, node, i), b)
		cancel()
		if err != nil {
			fmt.Fprintf(r.w.errOut, "launch: node 0: asking node %d to replace rank %d: %v\n", node, l.Rank, err)
			s.absorb(&ExitError{Rank: name, Err: fmt.Errorf("was never started: node 0 could not ask node %d for it (%v)", node, err)})
			continue
		}
		fmt.Fprintf(r.w.errOut, "launch: node 0: asked node %d's launcher to start rank %d in place of rank %d\n", node, name, l.Rank)
	}
}

// nodeLive reports whether node is in the job: not noted gone, and with a
// member of the current generation.
func (r *nodeRdzv) nodeLive(s *survival, node int) bool {
	r.goneMu.Lock()
	gone := r.gone[node] != ""
	r.goneMu.Unlock()
	ranks := s.place.ranksOf(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	return !gone && slices.ContainsFunc(s.members, func(m int) bool { return slices.Contains(ranks, m) })
}

// addReplacement names a joiner that node's launcher starts in place of
// a lost rank, places it on node and waits for it as a joiner.
func (s *survival) addReplacement(node int, why string) (int, error) {
	s.mu.Lock()
	switch {
	case s.names >= maxJoiners:
		s.mu.Unlock()
		return 0, fmt.Errorf("this attempt started %d joining ranks already, and takes at most %d", s.names, maxJoiners)
	case len(s.members)+len(s.joiners) >= s.world:
		s.mu.Unlock()
		return 0, fmt.Errorf("the job has no room: %s run, %d wait to join, of at most %d", Count(len(s.members), "rank"), len(s.joiners), s.world)
	}
	name := s.world + s.names
	s.names++
	s.joiners[name] = &joiner{name: name, node: node, started: time.Now(), why: why}
	s.mu.Unlock()
	s.place.addNames(node, name)
	return name, nil
}

// forgetJoinersOf, on node 0, forgets the joiners node's launcher was to
// start: the node left the job.
func (s *survival) forgetJoinersOf(node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.joiners, func(_ int, j *joiner) bool { return j.node == node })
}

// addNames adds joiners names to node's ranks (a replacement beside its
// ranks; setNames replaces them, for a node rejoining).
func (p *nodePlace) addNames(node int, names ...int) {
	ranks := p.ranksOf(node)
	p.setNames(node, append(ranks, names...))
}

// serveReplace, on member node, reads node 0's replace requests in order
// and starts each joiner (step 2 above), until ctx ends.
func (s *survival) serveReplace(ctx context.Context, node int) {
	for i := 1; ctx.Err() == nil; {
		b, err := s.store.Get(ctx, replaceKey(s.runID, node, i))
		if errors.Is(err, rendezvous.ErrTimeout) {
			continue
		}
		if err != nil {
			return
		}
		i++
		req, err := s.checkReplace(b)
		if err != nil {
			fmt.Fprintf(s.errOut, "launch: node %d: node 0's request %d to replace a rank does not check: %v\n", node, i-1, err)
			continue
		}
		s.place.addNames(node, req.Name)
		pid, err := s.spawn(req.Name, req.Local)
		if err != nil {
			fmt.Fprintf(s.errOut, "launch: node %d: starting rank %d (%s): %v\n", node, req.Name, req.Why, err)
			s.absorb(&ExitError{Rank: req.Name, Err: fmt.Errorf("could not be started on node %d: %v", node, err)})
			continue
		}
		s.started(req.Name, pid)
		_ = s.store.Set(ctx, pidKey(s.runID, req.Name), []byte(strconv.Itoa(pid)))
		fmt.Fprintf(s.errOut, "launch: node %d: started rank %d (pid %d) to join the job (%s)\n", node, req.Name, pid, req.Why)
	}
}

// checkReplace reads a replace request: a joining rank's name not in use
// on this node, a local rank of the node's, the rank replaced.
func (s *survival) checkReplace(b []byte) (replaceRequest, error) {
	var req replaceRequest
	if len(b) > maxReplaceBytes {
		return req, fmt.Errorf("%d bytes, more than %d", len(b), maxReplaceBytes)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return req, err
	}
	req.Why = untrusted.Text(req.Why, maxShownText)
	s.mu.Lock()
	_, used := s.pids[req.Name]
	s.mu.Unlock()
	switch {
	case req.Name < s.world || req.Name >= s.world+maxJoiners || used:
		return req, fmt.Errorf("name %d: want a joining rank's, %d..%d, not one in use", req.Name, s.world, s.world+maxJoiners-1)
	case req.Local < 0 || req.Local >= s.place.perNode:
		return req, fmt.Errorf("local rank %d: want 0..%d", req.Local, s.place.perNode-1)
	case req.Lost < 0 || req.Lost >= s.world+maxJoiners:
		return req, fmt.Errorf("replaced rank %d is out of range", req.Lost)
	case s.spawn == nil:
		return req, errors.New("this launcher starts no ranks during the attempt")
	}
	return req, nil
}
