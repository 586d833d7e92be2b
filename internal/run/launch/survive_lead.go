package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// The launcher's side of -on-failure continue on one host (survive.go has
// the ranks'). The launcher hosts the job's store and runs one
// coordinator per attempt, which for generation g:
//
//  1. waits for a fault: a member's process exits (the launcher sets g's
//     fault key for the others), or a member sets it (its collective
//     failed: a peer stalled past -timeout);
//  2. waits for the members to check in, until every member still
//     running has, or Elastic.CheckIn after the fault; a member that
//     exited, or did not check in (stopped, hung), is removed: its
//     membership is revoked for good;
//  3. decides: the members that checked in continue as generation g+1,
//     in their order at the job's start (a surviving rank 0 stays rank 0),
//     unless they are fewer than Elastic.MinRanks or Elastic.Fits refuses
//     their number, in which case the plan says restart, every rank stops
//     and the restart policy (elastic.go) takes over as for any failure;
//  4. publishes the plan at g+1's plan key, and reports the failure
//     (Elastic.OnContinue) once the status pipe shows a step of g+1.
//
// A rank exiting after its removal is no failure of the job; one still
// running when every member has ended (a stopped rank never continued) is
// stopped then.

// DefaultCheckIn is Elastic.CheckIn's default.
const DefaultCheckIn = 500 * time.Millisecond

// maxIdleGenerations is how many generations in a row may fail with every
// rank checking in (a fault that regrouping does not cure) before the job
// falls back to a restart.
const maxIdleGenerations = 3

// Continued is one failure the job survived, as reported to
// Elastic.OnContinue.
type Continued struct {
	Number     int // 1 for the job's first
	Generation int // the generation the survivors continue as
	Lost       []LostRank
	// Step is the last global step reported done before the failure (-1:
	// none).
	Step                 int64
	PreviousRanks, Ranks int
	FailedAt             time.Time     // when the launcher saw the failure
	Removed              time.Duration // from FailedAt to the plan's publication
	// TrainingAgain is from FailedAt to the first step of the new
	// generation (zero: none came); Paused from the last step before the
	// failure to that step.
	TrainingAgain   time.Duration
	TrainingAgainAt time.Time
	Paused          time.Duration
	// Resumed is the global step the new generation went on from, as its
	// rank 0 reported it on the status pipe (-1: not reported).
	Resumed int64
	// Reshard is, under ZeRO-1, the optimizer state's bytes the survivors
	// sent to re-shard it over the new generation, as its rank 0 reported
	// them with Resumed (-1: not reported, as under DDP); ReshardSent is
	// each rank's part, by rank of the new generation, as the ranks
	// counted and gathered them (nil: not reported, or not a part for
	// every rank summing to Reshard).
	Reshard     int64
	ReshardSent []int64
}

// LostRank is a rank removed from the job.
type LostRank struct {
	Rank, Pid int
	Reason    string
}

// survival is the coordinator of one attempt.
type survival struct {
	e       *Elastic
	w       io.Writer // the launcher's stdout, for the reports
	errOut  io.Writer
	runID   string
	world   int
	srv     *rendezvous.StoreServer
	store   *rendezvous.TCPStore
	prog    *progress
	counted *int // failures survived over the job

	exits    chan *ExitError // members' failures, from job.wait
	fallback chan *ExitError // the failure to end the attempt with
	lead     atomic.Int64    // the current generation's rank 0, by its rank at the start

	idle int // generations in a row that lost no rank

	// place, with several nodes, places the ranks on them
	// (survive_nodes.go); nil on one host. storeLost, on a member node,
	// is told when the ranks' store on node 0 fails.
	place     *nodePlace
	storeLost func(error)

	// Healing (survive_grow.go): spawn starts a joiner; joiners are those
	// started and not yet taken in, by name; names counts the names
	// given; ready carries the names of joiners found ready.
	spawn   spawnFunc
	joiners map[int]*joiner
	names   int
	ready   chan int
	// spawnReady is closed once spawn is set (the job's processes start
	// after the coordinator).
	spawnReady chan struct{}
	spareTally spareTally // replenishing spares (survive_spawn.go); under mu

	mu      sync.Mutex
	members []int
	revoked map[int]bool
	pids    map[int]int
	stop    context.CancelFunc
	done    chan struct{}
	reports sync.WaitGroup // the reports not yet made
}

// serve hosts the job's store on ln (the socket the launcher bound for
// it) with the job's secret, and starts the coordinator of a world of
// world ranks.
func (s *survival) serve(ln *os.File, vars []string, insecure bool, world int) error {
	nl, err := net.FileListener(ln)
	ln.Close()
	if err != nil {
		return fmt.Errorf("launch: the store's socket: %w", err)
	}
	scfg := rendezvous.StoreConfig{Secret: []byte(varValue(vars, EnvSecret)), Insecure: insecure}
	if s.srv, err = rendezvous.ServeStore(nl, scfg); err != nil {
		nl.Close()
		return fmt.Errorf("launch: hosting the job's store: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if s.store, err = rendezvous.DialStore(ctx, s.srv.Addr().String(), scfg); err != nil {
		cancel()
		s.srv.Close()
		return fmt.Errorf("launch: the job's store: %w", err)
	}
	s.runID = varValue(vars, EnvRunID)
	s.world = world
	s.members = make([]int, world)
	for i := range s.members {
		s.members[i] = i
	}
	s.revoked = map[int]bool{}
	if s.pids == nil {
		s.pids = map[int]int{}
	}
	s.exits, s.fallback = make(chan *ExitError, world+maxJoiners), make(chan *ExitError, 1)
	s.joiners, s.ready, s.spawnReady = map[int]*joiner{}, make(chan int, maxJoiners), make(chan struct{})
	s.stop, s.done = cancel, make(chan struct{})
	go s.run(ctx)
	return nil
}

// started records rank's pid.
func (s *survival) started(rank, pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pids == nil {
		s.pids = map[int]int{}
	}
	s.pids[rank] = pid
}

// close stops the coordinator and the store.
func (s *survival) close() {
	if s == nil || s.stop == nil {
		return
	}
	s.stop()
	<-s.done
	s.reports.Wait()
	_ = s.store.Close()
	_ = s.srv.Close()
}

// varValue is KEY's value in vars (KEY=VALUE), "" when absent.
func varValue(vars []string, key string) string {
	for _, kv := range vars {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// absorb is job.wait's hook for a rank's failure: true when the job goes
// on without it (a member, handed to the coordinator, or a rank already
// removed), false when it is the attempt's failure as without continue.
func (s *survival) absorb(e *ExitError) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[e.Rank] {
		return true
	}
	s.pids[e.Rank] = e.Pid
	select {
	case s.exits <- e:
		return true
	default: // cannot happen: one slot per rank
		return false
	}
}

// finished reports whether every member of the current generation has
// exited, given the ranks still running: those left are removed ranks,
// which job.wait then stops.
func (s *survival) finished(running func(rank int) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !slices.ContainsFunc(s.members, running)
}

// allMembers reports whether f holds for every member of the current
// generation.
func (s *survival) allMembers(f func(rank int) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !slices.ContainsFunc(s.members, func(m int) bool { return !f(m) })
}

func (s *survival) key(gen int, name string) string {
	return rendezvous.GenerationKey(s.runID, gen, name)
}

// run coordinates generation after generation until ctx ends or the job
// falls back to a restart.
func (s *survival) run(ctx context.Context) {
	defer close(s.done)
	select {
	case <-s.spawnReady:
	case <-ctx.Done():
		return
	}
	s.startSpares(ctx)
	for gen := 0; ; gen++ {
		f, ok := s.waitFault(ctx, gen)
		if !ok {
			return
		}
		if !s.decide(ctx, gen, f) {
			return
		}
	}
}

// fault is how a generation failed, as the launcher first saw it.
type fault struct {
	at     time.Time
	exit   *ExitError // the member that exited, nil when a member reported
	reason string
	step   int64     // the last step reported done then
	lastAt time.Time // when it was reported
	grow   []int     // a grow: the joiners to take in (survive_grow.go)
}

// waitFault waits for generation gen's fault: a member's exit (the
// launcher then sets the fault key, so that every member aborts) or a
// member's report.
func (s *survival) waitFault(ctx context.Context, gen int) (fault, bool) {
	reported := make(chan []byte, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for wctx.Err() == nil {
			v, err := s.store.Get(wctx, s.key(gen, "fault"))
			if err == nil {
				reported <- v
				return
			}
			if !errors.Is(err, rendezvous.ErrTimeout) {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return fault{}, false
		case e := <-s.exits:
			if !s.isMember(e.Rank) {
				s.joinerExited(ctx, e)
				continue
			}
			f := s.newFault(e, e.Error())
			_ = s.store.Set(ctx, s.key(gen, "fault"), []byte("launcher: "+f.reason))
			return f, true
		case v := <-reported:
			return s.newFault(nil, string(v)), true
		case name := <-s.ready:
			if f, ok := s.growFault(ctx, gen, name); ok {
				return f, true
			}
		}
	}
}

func (s *survival) newFault(e *ExitError, reason string) fault {
	f := fault{at: time.Now(), exit: e, reason: reason}
	_, f.step, _ = s.prog.snapshot()
	f.lastAt = s.prog.lastStepAt()
	return f
}

func (s *survival) isMember(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.members, rank)
}

// checkIns waits for generation gen's members to check in after fault f,
// until all have or Elastic.CheckIn has passed, and returns who did and
// who is lost (exited, or silent), with the reasons.
func (s *survival) checkIns(ctx context.Context, gen int, f fault) (alive []int, lost []LostRank) {
	s.mu.Lock()
	members := slices.Clone(s.members)
	s.mu.Unlock()
	gone := map[int]*ExitError{}
	if f.exit != nil {
		gone[f.exit.Rank] = f.exit
	}
	wctx, cancel := context.WithDeadline(ctx, f.at.Add(s.e.CheckIn))
	defer cancel()
	in := make(chan int, len(members))
	waiting := 0
	for _, m := range members {
		if gone[m] != nil {
			continue
		}
		waiting++
		go func() {
			if _, err := s.store.Get(wctx, s.key(gen, "alive/"+strconv.Itoa(m))); err == nil {
				in <- m
			}
		}()
	}
	checked := map[int]bool{}
	for len(checked) < waiting && wctx.Err() == nil {
		select {
		case m := <-in:
			checked[m] = true
		case e := <-s.exits: // lost, whether it checked in or not
			if !slices.Contains(members, e.Rank) {
				s.joinerExited(ctx, e)
			} else if gone[e.Rank] == nil {
				gone[e.Rank] = e
				if !checked[e.Rank] {
					waiting--
				}
			}
		case <-wctx.Done():
		}
	}
	for _, m := range members {
		switch {
		case checked[m] && gone[m] == nil:
			alive = append(alive, m)
		case gone[m] != nil:
			lost = append(lost, LostRank{Rank: m, Pid: gone[m].Pid, Reason: gone[m].Reason()})
		default:
			lost = append(lost, LostRank{Rank: m, Pid: s.pidOf(m), Reason: fmt.Sprintf(
				"it did not check in within %v of the failure (stopped, hung or cut off)", s.e.CheckIn)})
		}
	}
	return alive, lost
}

func (s *survival) pidOf(rank int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pids[rank]
}

// decide makes and publishes generation gen+1's plan after fault f; false
// when the job falls back to a restart (or ctx ended).
func (s *survival) decide(ctx context.Context, gen int, f fault) bool {
	alive, lost := s.checkIns(ctx, gen, f)
	if ctx.Err() != nil {
		return false
	}
	s.placeLost(lost)
	p := genPlan{Gen: gen + 1, Members: alive}
	for _, l := range lost {
		p.Lost = append(p.Lost, lostRank{Rank: l.Rank, Reason: l.Reason})
	}
	s.takeIn(&p, f)
	if len(lost) == 0 && len(p.Joined) == 0 {
		s.idle++
	} else {
		s.idle = 0
	}
	p.Restart = s.cannotContinue(len(alive), len(p.Members), lost, f)
	s.placeMembers(&p)
	s.mu.Lock()
	prev := len(s.members)
	for _, l := range lost {
		s.revoked[l.Rank] = true
	}
	if p.Restart == "" {
		s.members = p.Members
		s.lead.Store(int64(alive[0]))
	}
	s.mu.Unlock()
	first := LostRank{Rank: -1, Reason: f.reason}
	if len(lost) > 0 {
		first = lost[0]
	}
	if p.Restart != "" {
		// The attempt's end first, then the plan that makes the ranks exit.
		fmt.Fprintf(s.errOut, "launch: %s; %s: falling back to a restart\n", lostText(lost, f.reason), p.Restart)
		culprit := f.exit
		if culprit == nil {
			culprit = &ExitError{Rank: first.Rank, Pid: first.Pid, Err: errors.New(first.Reason)}
		}
		s.fallback <- culprit
		_ = s.store.Set(ctx, s.key(gen+1, "plan"), p.encode())
		return false
	}
	if err := s.store.Set(ctx, s.key(gen+1, "plan"), p.encode()); err != nil {
		if ctx.Err() == nil {
			s.fallback <- &ExitError{Rank: first.Rank, Pid: first.Pid, Err: fmt.Errorf("publishing generation %d's plan: %w", gen+1, err)}
		}
		return false
	}
	published := time.Now()
	s.admit(ctx, p)
	s.replenish(ctx, p, lost)
	if len(lost) > 0 {
		// Once the survivors train again: a process starting (its data
		// loading) would take the cores their rebuild needs.
		s.reports.Go(func() {
			s.stepBoundary(ctx, 5*time.Second)
			s.refill(ctx, lost)
		})
	}
	if len(lost) == 0 && len(p.Joined) > 0 {
		return true
	}
	if len(lost) == 0 {
		fmt.Fprintf(s.errOut, "launch: generation %d failed (%s) but every rank checked in: continuing on all %s as generation %d\n",
			gen, f.reason, Count(len(alive), "rank"), gen+1)
		return true
	}
	*s.counted++
	c := Continued{Number: *s.counted, Generation: gen + 1, Lost: lost, Step: f.step, PreviousRanks: prev, Ranks: len(alive),
		FailedAt: f.at, Removed: published.Sub(f.at), Resumed: -1, Reshard: -1}
	fmt.Fprintf(s.errOut, "launch: %s; continuing on %s as generation %d (%v after the failure)\n",
		lostText(lost, f.reason), Count(len(alive), "rank"), gen+1, c.Removed.Round(time.Millisecond))
	s.nodesGone(lost)
	if s.e.OnContinue != nil {
		s.reports.Go(func() { s.report(ctx, c, published, f.lastAt) })
	}
	return true
}

// report reports c once the status pipe shows a step after the plan's
// publication (or when ctx ends without one).
func (s *survival) report(ctx context.Context, c Continued, published, lastBefore time.Time) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for at := s.prog.lastStepAt(); !at.After(published); at = s.prog.lastStepAt() {
		select {
		case <-ctx.Done():
			s.e.OnContinue(s.w, c) // ended before training again
			return
		case <-t.C:
		}
	}
	c.TrainingAgainAt = s.prog.lastStepAt()
	if step, at, reshard, sent := s.prog.lastResume(); at.After(published) {
		c.Resumed, c.Reshard = step, reshard
		if len(sent) == c.Ranks {
			c.ReshardSent = sent
		}
	}
	c.TrainingAgain = c.TrainingAgainAt.Sub(c.FailedAt)
	if !lastBefore.IsZero() {
		c.Paused = c.TrainingAgainAt.Sub(lastBefore)
	}
	s.e.OnContinue(s.w, c)
}

// lostText words the ranks removed: "rank 2 (pid 42) was killed by signal
// killed"; none: the failure's reason.
func lostText(lost []LostRank, reason string) string {
	if len(lost) == 0 {
		return "the group failed (" + reason + ") with every rank still answering"
	}
	parts := make([]string, len(lost))
	for i, l := range lost {
		parts[i] = fmt.Sprintf("rank %d (pid %d) %s", l.Rank, l.Pid, l.Reason)
		if !strings.HasPrefix(l.Reason, "was ") && !strings.HasPrefix(l.Reason, "exited ") {
			parts[i] = fmt.Sprintf("rank %d (pid %d) was removed: %s", l.Rank, l.Pid, l.Reason)
		}
	}
	return strings.Join(parts, "; ")
}

// currentMembers is the current generation's members (job-start ranks).
func (s *survival) currentMembers() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.members...)
}

// cannotContinue is why the job cannot go on with alive ranks of the
// current members left (members in the next generation, joiners
// included) after losing lost in fault f: the plan's Restart, or "".
func (s *survival) cannotContinue(alive, members int, lost []LostRank, f fault) string {
	switch {
	case s.idle > maxIdleGenerations:
		return fmt.Sprintf("the group failed %d times in a row with every rank still answering (last: %s)", s.idle, f.reason)
	case alive < s.e.MinRanks:
		return fmt.Sprintf("%s left, fewer than the minimum of %d (-min-ranks)", Count(alive, "rank"), s.e.MinRanks)
	}
	if s.e.Fits != nil {
		if err := s.e.Fits(members); err != nil {
			return err.Error()
		}
	}
	if s.e.Survives != nil {
		if err := s.survives(lost); err != nil {
			return err.Error()
		}
	}
	return ""
}

// survives is Elastic.Survives of the current members, on their nodes
// (across node launchers), losing lost.
func (s *survival) survives(lost []LostRank) error {
	members := s.currentMembers()
	var nodes []int
	if s.place != nil {
		nodes = make([]int, len(members))
		for i, m := range members {
			nodes[i] = s.place.nodeOf(m)
		}
	}
	return s.e.Survives(members, nodes, lostRanks(lost))
}

func lostRanks(lost []LostRank) []int {
	out := make([]int, len(lost))
	for i, l := range lost {
		out[i] = l.Rank
	}
	return out
}
