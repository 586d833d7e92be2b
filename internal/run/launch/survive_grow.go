package launch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Healing (Elastic.Heal, docs/elastic.md): the launcher's side of growing
// the group back after a loss. The coordinator (survive_lead.go)
//
//  1. starts a joiner — a rank process under a name no rank had
//     (world, world+1, ...: a removed rank's name is never reused, so its
//     revocation stays final) — for every rank lost, once the survivors
//     report a step (its start would slow their rebuild), or with
//     Elastic.Spares starts that many with the job, which wait ready;
//  2. watches each joiner's join key: once it is set the joiner has its
//     data and reached the store;
//  3. with the group below its size and a joiner ready, waits for the
//     next step the status pipe reports (a step boundary: the step the
//     members are in has barely begun) and sets the generation's fault
//     key with the reason "grow": every member aborts, checks in, and the
//     plan of the next generation has the members that checked in then
//     the joiners, named in Joined (and Joins: pid, start, why);
//  4. writes the generation at each joiner's join-generation key, so the
//     joiner dials it with the members.
//
// The members then heal the joiner (the trainer: striped over them,
// SHA-256 checked, replicas compared). A joiner that exits before it is
// taken in is replaced in turn; one that dies while healing is a lost
// member like any other. At most maxJoiners joiners start per attempt.

// joiner is a rank started to join, not yet taken in.
type joiner struct {
	name, pid int
	node      int // the node whose launcher started it (0: this launcher's own)
	started   time.Time
	readyAt   time.Time // when its join key was seen
	why       string
	ready     bool
}

// checkHeal checks Heal and Spares.
func (e *Elastic) checkHeal() error {
	switch {
	case e.Spares < 0 || e.Spares > maxSpares:
		return fmt.Errorf("launch: %d spares: want 0..%d", e.Spares, maxSpares)
	case (e.Heal || e.Spares > 0) && !e.Continue:
		return errors.New("launch: healing a lost rank back (spares, replacements) needs survivors continuing")
	}
	return nil
}

// growWait is the longest a grow waits for a step boundary.
const growWait = 10 * time.Second

// maxSpares is the most spares a job may hold.
const maxSpares = 16

// spawnFunc starts a joiner named name on local rank local (its cores)
// and returns its pid.
type spawnFunc func(name, local int) (int, error)

// startSpares starts Elastic.Spares joiners with the job.
func (s *survival) startSpares(ctx context.Context) {
	for i := range s.e.Spares {
		s.startJoiner(ctx, i%s.world, "spare started with the job")
	}
}

// startJoiner starts one joiner and watches for it to be ready.
func (s *survival) startJoiner(ctx context.Context, local int, why string) {
	if s.spawn == nil {
		return
	}
	s.mu.Lock()
	name := s.world + s.names
	if s.names >= maxJoiners {
		s.mu.Unlock()
		fmt.Fprintf(s.errOut, "launch: not starting a rank to %s: this attempt started %d joining ranks already\n", why, maxJoiners)
		return
	}
	s.names++
	s.mu.Unlock()
	started := time.Now()
	pid, err := s.spawn(name, local)
	if err != nil {
		fmt.Fprintf(s.errOut, "launch: starting rank %d to join (%s): %v\n", name, why, err)
		return
	}
	s.mu.Lock()
	s.joiners[name] = &joiner{name: name, pid: pid, started: started, why: why}
	s.pids[name] = pid
	s.mu.Unlock()
	fmt.Fprintf(s.errOut, "launch: started rank %d (pid %d) to join the job (%s)\n", name, pid, why)
	go s.watchJoinKey(ctx, name)
}

// watchJoinKey waits for joiner name's join key: it is ready.
func (s *survival) watchJoinKey(ctx context.Context, name int) {
	for ctx.Err() == nil {
		_, err := s.store.Get(ctx, s.key(0, joinKeyName(name)))
		if err == nil {
			select {
			case s.ready <- name:
			case <-ctx.Done():
			}
			return
		}
		if !errors.Is(err, rendezvous.ErrTimeout) {
			return
		}
	}
}

// refill starts a joiner for each place the group lacks that no joiner
// waiting fills, each on the cores of a rank lost (lost, by name).
func (s *survival) refill(ctx context.Context, lost []LostRank) {
	if !s.e.Heal {
		return
	}
	if s.place != nil {
		// Several nodes: node 0 replaces its own ranks; a live node's
		// launcher another node's (nodes_replace.go); a node that left
		// comes back with its launcher (nodes_rejoin.go).
		if s.place.replace != nil {
			s.place.replace(lost)
		}
		lost = slices.DeleteFunc(slices.Clone(lost), func(l LostRank) bool { return s.place.nodeOf(l.Rank) != 0 })
	}
	s.mu.Lock()
	need := s.world - len(s.members) - len(s.joiners)
	if s.place != nil {
		need = min(s.capacity()-len(s.members)-len(s.joiners), len(lost))
	}
	s.mu.Unlock()
	for i := range need {
		local, why := 0, "replacement"
		if i < len(lost) {
			local, why = lost[i].Rank%s.world, fmt.Sprintf("replaces rank %d, which %s", lost[i].Rank, removedWords(lost[i].Reason))
		}
		s.startJoiner(ctx, local, why)
	}
	s.resignal()
}

// resignal hands the ready joiners to the coordinator again (the group
// may have room for them now).
func (s *survival) resignal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.joiners {
		if j.ready {
			select {
			case s.ready <- j.name:
			default:
			}
		}
	}
}

// joinerExited is a joiner's exit before it was taken in: it is
// forgotten, and replaced.
func (s *survival) joinerExited(ctx context.Context, e *ExitError) {
	s.mu.Lock()
	j := s.joiners[e.Rank]
	delete(s.joiners, e.Rank)
	s.mu.Unlock()
	if j == nil {
		return
	}
	fmt.Fprintf(s.errOut, "launch: rank %d (pid %d), started to join, %s before it was taken in\n", e.Rank, e.Pid, removedWords(e.Reason()))
	if j.node != 0 {
		// Its node's launcher started it: a live node's is asked for
		// another (nodes_replace.go); a node that left may rejoin again.
		if s.place != nil && s.place.replace != nil {
			s.place.replace([]LostRank{{Rank: e.Rank, Pid: e.Pid, Reason: e.Reason() + " before it was taken in"}})
		}
		return
	}
	s.mu.Lock()
	need := s.world - len(s.members) - len(s.joiners)
	s.mu.Unlock()
	if need > 0 {
		s.startJoiner(ctx, e.Rank%s.world, fmt.Sprintf("replaces rank %d, which %s before it was taken in", e.Rank, removedWords(e.Reason())))
	}
}

// growFault, on joiner name ready, decides whether the group grows now:
// the joiners ready that fit (the group's capacity at most — the world
// size at the start, or with -nnodes MIN:MAX, MAX × -ranks — and a size
// Elastic.Fits allows), then, at the next step boundary, generation
// gen's fault key set to "grow". Not ok: no grow now.
func (s *survival) growFault(ctx context.Context, gen, name int) (fault, bool) {
	s.mu.Lock()
	if j := s.joiners[name]; j != nil && !j.ready {
		j.ready, j.readyAt = true, time.Now()
	}
	var ready []int
	for n, j := range s.joiners {
		if j.ready && s.nodeReady(j.node) {
			ready = append(ready, n)
		}
	}
	slices.Sort(ready)
	room := s.capacity() - len(s.members)
	members := len(s.members)
	s.mu.Unlock()
	k := min(room, len(ready))
	for ; k > 0 && s.e.Fits != nil && s.e.Fits(members+k) != nil; k-- {
	}
	if k == 0 {
		return fault{}, false
	}
	// A step of this generation (not the rebuild or heal that formed it:
	// a grow then would abort it) just done; a generation that reports
	// none within growWait grows anyway.
	s.stepBoundary(ctx, growWait)
	reason := "grow: rank " + joinInts(ready[:k]) + " joins"
	if err := s.store.Set(ctx, s.key(gen, "fault"), []byte("launcher: "+reason)); err != nil {
		return fault{}, false
	}
	f := s.newFault(nil, reason)
	f.grow = ready[:k]
	return f, true
}

// stepBoundary waits until the status pipe reports a step after now, or
// at most wait.
func (s *survival) stepBoundary(ctx context.Context, wait time.Duration) {
	since := s.prog.lastStepAt()
	deadline := time.Now().Add(wait)
	t := time.NewTicker(500 * time.Microsecond)
	defer t.Stop()
	for s.prog.lastStepAt().Equal(since) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// takeIn adds the joiners of a grow to plan p (those still waiting).
func (s *survival) takeIn(p *genPlan, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range f.grow {
		j := s.joiners[name]
		if j == nil {
			continue // exited meanwhile
		}
		if j.pid == 0 {
			j.pid = s.pids[name] // another node's: as its launcher published it
		}
		p.Members = append(p.Members, name)
		p.Joined = append(p.Joined, name)
		info := joinInfo{Name: name, Pid: j.pid, Started: j.started.UnixNano(), Ready: j.readyAt.UnixNano(), Why: j.why}
		if s.place != nil {
			info.Node = &j.node
		}
		p.Joins = append(p.Joins, info)
	}
}

// admit tells the joiners of p, just published, which generation takes
// them in.
func (s *survival) admit(ctx context.Context, p genPlan) {
	back := map[int][]int{} // other nodes' joiners, by node
	s.mu.Lock()
	for _, name := range p.Joined {
		if j := s.joiners[name]; j != nil && j.node != 0 {
			back[j.node] = append(back[j.node], name)
		}
		delete(s.joiners, name)
	}
	s.mu.Unlock()
	for node, names := range back {
		if s.place != nil && s.place.back != nil {
			s.place.back(node, names)
		}
	}
	for i, name := range p.Joined {
		_ = s.store.Set(ctx, s.key(0, joinKeyName(name)+"/gen"), []byte(strconv.Itoa(p.Gen)))
		fmt.Fprintf(s.errOut, "launch: rank %d (pid %d) joins as rank %d of generation %d (%d ranks; %s)\n",
			name, p.Joins[i].Pid, p.index(name), p.Gen, len(p.Members), p.Joins[i].Why)
	}
}

// removedWords words a rank's removal after "which" or "rank r".
func removedWords(reason string) string {
	if strings.HasPrefix(reason, "was ") || strings.HasPrefix(reason, "exited ") {
		return reason
	}
	return "was removed: " + reason
}

func joinInts(v []int) string {
	out := ""
	for i, x := range v {
		if i > 0 {
			out += ", "
		}
		out += strconv.Itoa(x)
	}
	return out
}

// nodeReady reports whether every joiner node's launcher started is ready
// (node 0's own: always): a node's ranks join together, in one grow.
func (s *survival) nodeReady(node int) bool {
	return node == 0 || !slices.ContainsFunc(slices.Collect(maps.Values(s.joiners)), func(j *joiner) bool { return j.node == node && !j.ready })
}

// addRemote takes count ranks that node's launcher starts to join (a node
// rejoining, nodes_rejoin.go): it gives them names, places them on node,
// watches their exits and pids (under wg) and their join keys. why says
// why they join.
func (s *survival) addRemote(ctx context.Context, wg *sync.WaitGroup, node, count int, why string) ([]int, error) {
	s.mu.Lock()
	switch {
	case s.names+count > maxJoiners:
		s.mu.Unlock()
		return nil, fmt.Errorf("this attempt started %d joining ranks already, and takes at most %d", s.names, maxJoiners)
	case len(s.members)+len(s.joiners)+count > s.capacity():
		room := s.capacity() - len(s.members) - len(s.joiners)
		s.mu.Unlock()
		return nil, fmt.Errorf("the job has room for %s (it runs %s of at most %d, %d more waiting to join), not %d",
			Count(max(room, 0), "rank"), Count(len(s.members), "rank"), s.capacity(), len(s.joiners), count)
	}
	names := make([]int, count)
	now := time.Now()
	for i := range names {
		names[i] = s.world + s.names
		s.names++
		s.joiners[names[i]] = &joiner{name: names[i], node: node, started: now, why: why}
	}
	s.mu.Unlock()
	s.place.setNames(node, names)
	for _, name := range names {
		s.watchRemote(ctx, wg, name)
		wg.Go(func() { s.watchJoinKey(ctx, name) })
	}
	return names, nil
}
