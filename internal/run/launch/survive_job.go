package launch

import (
	"context"
	"errors"
	"slices"
	"time"
)

// The job's side of survivors continuing (survive_lead.go): what job.wait
// does differently when a member's failure does not end the attempt.

// awaitFallback, with survivors continuing, makes the attempt's end a
// failure when a member of its last generation did not exit 0 (every
// member failed, or the job fell back to a restart): it takes the
// coordinator's fallback, waiting for its decision if need be.
func (j *job) awaitFallback(ctx context.Context) {
	if j.survive == nil || j.first != nil || j.signaled != nil || ctx.Err() != nil {
		return
	}
	clean := func(rank int) bool {
		p := j.proc(rank)
		if p == nil {
			return true // another node's rank: its launcher reports its end
		}
		st := p.cmd.ProcessState
		return st != nil && st.Success()
	}
	if j.survive.allMembers(clean) {
		return
	}
	t := time.NewTimer(2*j.survive.e.CheckIn + time.Second)
	defer t.Stop()
	// Another node's launcher: the plan that removes its failed ranks
	// (the job goes on without them) may come meanwhile.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ee := <-j.failReq:
			j.fail(ee)
			return
		case <-tick.C:
			if j.survive.allMembers(clean) {
				return
			}
		case <-t.C:
			j.fail(&ExitError{Rank: -1, Err: errors.New("the job's ranks ended without finishing and without a plan to go on")})
			return
		}
	}
}

// stopRemoved, with survivors continuing, stops the ranks still running
// once every member of the job's generation has ended: they are removed
// ranks (a stopped rank never continued), which would otherwise hold the
// job forever.
func (j *job) stopRemoved() {
	if j.survive == nil || j.stopping {
		return
	}
	running := func(rank int) bool {
		return slices.ContainsFunc(j.procs, func(p *proc) bool { return p.rank == rank && !p.done })
	}
	if !slices.ContainsFunc(j.procs, func(p *proc) bool { return !p.done }) || !j.survive.finished(running) {
		return
	}
	j.stop("launch: every rank of the job has ended; stopping the removed ranks still running")
}
