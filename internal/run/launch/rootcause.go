package launch

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The root cause of a failed job. The first rank to exit is often not the
// culprit: when a rank hangs (stopped, deadlocked, never calling the next
// collective) every other rank times out or is aborted by one that did,
// and whichever of them exits first would be blamed. The launcher keeps
// what it needs to tell them apart: each rank's process state when the
// first failure was seen (a rank stopped by SIGSTOP or a debugger is 'T'),
// how each rank ended, and each rank's last line on stderr (its error,
// which names the call it was in: "#3750 AllReduce(float32 × 262144,
// Sum)", and the peer it timed out on: "recv with rank 1: no progress").

// RootCauseError is a failed job's root cause, when it is not simply the
// first rank that exited: the rank, what happened to it and the call the
// others were waiting for it in. It wraps the first failure.
type RootCauseError struct {
	Rank  int
	Pid   int
	What  string // "was stopped (SIGSTOP or a debugger)", "hung", "was killed by signal killed", ...
	Call  string // the collective the others were in ("" unknown): "#3750 AllReduce(float32 × 262144, Sum)"
	Peers []int  // the ranks that timed out waiting for it
	First *ExitError
}

func (e *RootCauseError) Error() string {
	s := fmt.Sprintf("rank %d (pid %d) %s", e.Rank, e.Pid, e.What)
	if e.Call != "" {
		s += " and never completed " + e.Call
	}
	if len(e.Peers) > 0 {
		s += " (" + ranksText(e.Peers) + " timed out waiting for it)"
	}
	if e.First != nil && e.First.Rank != e.Rank {
		s += fmt.Sprintf("; first exit: %v", e.First)
	}
	return s
}

func (e *RootCauseError) Unwrap() error { return e.First }

var (
	callRE    = regexp.MustCompile(`#\d+ [A-Za-z]+\([^)]*\)`)
	timeoutRE = regexp.MustCompile(`(?:recv|send) with rank (\d+): no progress for`)
	// A consequence of another rank's failure, not a failure of its own.
	consequenceRE = regexp.MustCompile(`rank \d+ failed|aborted|no progress for|peer failed|connection reset|broken pipe|EOF|group failed`)
)

// rankRecord is what the launcher saw of one rank.
type rankRecord struct {
	lastErr   string    // its last stderr line
	stateAtF  byte      // its process state when the first failure was seen (0: exited or unknown)
	exitedAt  time.Time // when it exited
	ownSignal bool      // killed by a signal the launcher did not send
}

// rootCause names the job's root cause: in order, a rank that was stopped
// when the first failure was seen; a rank killed by a signal the launcher
// did not send; a rank that failed with an error that is not a
// consequence of another's; a rank the timeouts name that did not fail on
// its own. Nil when there is no better answer than j.first.
func (j *job) rootCause() *RootCauseError {
	if j.first == nil {
		return nil
	}
	call := func(victim int) (string, []int) {
		var c string
		var peers []int
		for _, p := range j.procs {
			m := timeoutRE.FindStringSubmatch(p.rec.lastErr)
			if m != nil && m[1] == strconv.Itoa(victim) {
				peers = append(peers, p.rank)
				if c == "" {
					c = callRE.FindString(p.rec.lastErr)
				}
			}
		}
		if c == "" {
			for _, p := range j.procs {
				if p.rank != victim {
					if c = callRE.FindString(p.rec.lastErr); c != "" {
						break
					}
				}
			}
		}
		return c, peers
	}
	mk := func(p *proc, what string) *RootCauseError {
		c, peers := call(p.rank)
		return &RootCauseError{Rank: p.rank, Pid: p.cmd.Process.Pid, What: what, Call: c, Peers: peers, First: j.first}
	}
	for _, p := range j.procs {
		if s := p.rec.stateAtF; s == 'T' || s == 't' {
			return mk(p, "was stopped (SIGSTOP or a debugger)")
		}
	}
	for _, p := range j.procs {
		if p.rec.ownSignal && p.rank != j.first.Rank {
			return mk(p, describeExit(p.cmd.ProcessState))
		}
	}
	if j.first.State != nil && !consequenceRE.MatchString(j.rankRecord(j.first.Rank).lastErr) {
		return nil // the first failure is its own
	}
	for _, p := range j.procs {
		st := p.cmd.ProcessState
		if p.rank == j.first.Rank || st == nil || st.Success() || p.rec.lastErr == "" {
			continue
		}
		if !consequenceRE.MatchString(p.rec.lastErr) && !p.rec.exitedAt.After(j.failedAt.Add(time.Second)) {
			return mk(p, describeExit(st)+": "+p.rec.lastErr)
		}
	}
	// The rank the timeouts name most often, unless it timed out itself.
	votes := map[int]int{}
	for _, p := range j.procs {
		if m := timeoutRE.FindStringSubmatch(p.rec.lastErr); m != nil {
			r, _ := strconv.Atoi(m[1])
			votes[r]++
		}
	}
	var named []int
	for r := range votes {
		named = append(named, r)
	}
	slices.SortFunc(named, func(a, b int) int { return votes[b] - votes[a] })
	for _, r := range named {
		p := j.proc(r)
		if p == nil || timeoutRE.MatchString(p.rec.lastErr) {
			continue
		}
		return mk(p, "hung: it sent nothing until the others timed out")
	}
	return nil
}

func (j *job) proc(rank int) *proc {
	for _, p := range j.procs {
		if p.rank == rank {
			return p
		}
	}
	return nil
}

func (j *job) rankRecord(rank int) rankRecord {
	if p := j.proc(rank); p != nil {
		return p.rec
	}
	return rankRecord{}
}

// snapshotStates records every running rank's process state, at the first
// failure.
func (j *job) snapshotStates() {
	for _, p := range j.procs {
		if !p.done {
			p.rec.stateAtF = procState(p.cmd.Process.Pid)
		}
	}
}

// exited records how p ended; sent says whether the launcher had sent
// the ranks a signal by then. A rank killed by a signal the launcher had
// not sent (a SIGKILL from the OOM killer or a user, while the launcher
// had only sent SIGTERM on stopping the job) died of its own cause, even
// if it is reaped after another rank's failure started the stop.
func (p *proc) exited(sent func(os.Signal) bool) {
	p.rec.exitedAt = time.Now()
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && !sent(ws.Signal()) {
			p.rec.ownSignal = true
		}
	}
}

// culprit is the exit to blame for a failed attempt once every rank has
// exited: a rank killed by a signal the launcher did not send (even one
// reaped after the launcher began stopping the job, when it has no first
// failure), else the first failure if it is its own, else another failed
// rank whose last error is not a consequence of a peer's, else the first
// failure (nil if there is none). The first rank to exit is often a
// consequence: its peer's death cut its connection before the launcher
// reaped the peer.
func (j *job) culprit() *ExitError {
	exitOf := func(p *proc) *ExitError {
		return &ExitError{Rank: p.rank, Pid: p.cmd.Process.Pid, State: p.cmd.ProcessState}
	}
	for _, p := range j.procs {
		if p.rec.ownSignal && p.cmd.ProcessState != nil {
			return exitOf(p)
		}
	}
	if j.first == nil || !j.consequence(j.first) {
		return j.first
	}
	for _, p := range j.procs {
		st := p.cmd.ProcessState
		if p.rank == j.first.Rank || st == nil || st.Success() {
			continue
		}
		p.mu.Lock()
		own := p.rec.lastErr != "" && !consequenceRE.MatchString(p.rec.lastErr)
		p.mu.Unlock()
		if own {
			return exitOf(p)
		}
	}
	return j.first
}

// lastLine keeps the last line a rank wrote to stderr.
func (p *proc) lastLine(line []byte) {
	s := strings.TrimSpace(string(line))
	if s == "" {
		return
	}
	p.mu.Lock()
	p.rec.lastErr = s
	p.mu.Unlock()
}
