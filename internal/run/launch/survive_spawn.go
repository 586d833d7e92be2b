package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"
)

// Starting joiners (survive_grow.go) while the job runs: job.wait owns the
// job's processes, so a joiner started by the coordinator is handed to it
// on added; once wait has collected every process (over closed) no joiner
// starts.

// setSpawn gives the coordinator its way to start joiners; it waits for it
// before starting the spares. A member node's survival (survive_nodes.go)
// has no coordinator of its own and starts no joiners.
func (s *survival) setSpawn(f spawnFunc) {
	s.spawn = f
	if s.spawnReady != nil {
		close(s.spawnReady)
	}
}

// spawner starts joiners as ranks of the attempt: the ranks' command and
// environment, local rank local's cores, EnvJoinName set, output forwarded
// as the ranks'. A joiner gets no status pipe (it never joins as rank 0).
func (j *job) spawner(cfg Config, w outputs, a attempt, base, vars []string, lead *atomic.Int64) spawnFunc {
	j.added, j.over = make(chan *proc), make(chan struct{})
	return func(name, local int) (int, error) {
		cmd := exec.Command(cfg.Path, a.args...)
		cmd.Env = append(rankEnv(cfg, base, vars, a.env, local), EnvJoinName+"="+strconv.Itoa(name))
		p := &proc{rank: name, cmd: cmd}
		flush := w.forward(cmd, cfg, name, p.lastLine, lead)
		cmd.SysProcAttr = sysProcAttr()
		cmd.WaitDelay = cfg.Grace
		select {
		case <-j.over:
			return 0, errors.New("the job has ended")
		default:
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("starting %s: %w", cfg.Path, err)
		}
		select {
		case j.added <- p:
		case <-j.over:
			signalProc(cmd.Process, os.Kill)
			_ = cmd.Wait()
			return 0, errors.New("the job has ended")
		}
		go func() {
			err := cmd.Wait()
			for _, lw := range flush {
				lw.flush()
			}
			j.exits <- exit{p: p, err: err}
		}()
		return cmd.Process.Pid, nil
	}
}

// Spares replenished (Elastic.Spares): the launcher keeps Spares ranks
// waiting, ready, beyond the places the group lacks. The rule:
//
//  1. a grow that takes joiners in (decide, after admit) leaves fewer
//     waiting: for each one missing the launcher starts a new spare, once
//     the grown generation reports a step (a process starting takes the
//     cores the heal and the first steps need), on the cores of local
//     rank (Spares + spares replenished so far) mod world;
//  2. bounded: at most one new spare per rank the attempt lost (a spare
//     is taken only into a lost rank's place, so this never holds back a
//     replenishment; it bounds the processes an attempt starts at
//     Spares + ranks lost, within maxJoiners), and a spare that exits
//     while it waits is not restarted (joinerExited replaces only a
//     joiner a lacking place needs);
//  3. each start is a line on stderr ("launch: started rank 6 (pid ...) to
//     join the job (spare, replenished after rank 4 was taken in at
//     generation 2)"), and its heal, when it is taken, names it so in the
//     heal record's why.

// spareTally counts what the replenishing rule bounds.
type spareTally struct {
	lost        int // ranks the attempt lost
	replenished int // spares started after spares were taken
}

// replenish applies the rule above after plan p, just published and
// admitted, removed lost.
func (s *survival) replenish(ctx context.Context, p genPlan, lost []LostRank) {
	s.mu.Lock()
	s.spareTally.lost += len(lost)
	waiting := len(s.joiners) - (s.world - len(s.members)) // joiners beyond the places lacking
	n := min(s.e.Spares-waiting, s.spareTally.lost-s.spareTally.replenished)
	if len(p.Joined) == 0 || s.e.Spares == 0 || n <= 0 {
		s.mu.Unlock()
		return
	}
	first := s.e.Spares + s.spareTally.replenished
	s.spareTally.replenished += n
	s.mu.Unlock()
	why := fmt.Sprintf("spare, replenished after rank %s was taken in at generation %d", joinInts(p.Joined), p.Gen)
	s.reports.Go(func() {
		s.stepBoundary(ctx, 5*time.Second)
		if ctx.Err() != nil {
			return // the attempt is over: no spare to keep
		}
		for i := range n {
			s.startJoiner(ctx, (first+i)%s.world, why)
		}
	})
}
