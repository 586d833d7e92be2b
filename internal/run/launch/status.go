package launch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The status pipe. An elastic launcher (elastic.go) hands every rank the
// write end of one pipe, its descriptor number in RINGDDP_STATUS_FD, on
// which a rank reports its progress as lines: "start STEP" when it begins
// training at global step STEP, "step STEP" after each optimizer step,
// and, on the new rank 0 after a failure survived, "resume STEP" when the
// survivors go on from global step STEP — "resume STEP BYTES" under
// ZeRO-1, BYTES being the optimizer state's bytes the re-shard over the
// survivors sent (all ranks together), followed by "reshard RANK BYTES"
// for every rank of the new generation in rank order, BYTES being its
// part (as the ranks counted and gathered it: zero.Moved). A line is one
// write of far less than PIPE_BUF bytes, so lines from several ranks
// never interleave. The launcher learns from it where a failed
// attempt had got to (the steps lost) and when a restarted one trains
// again.

// Environment variables of an elastic launcher's ranks.
const (
	// EnvStatusFD is the number of the inherited status pipe descriptor.
	EnvStatusFD = "RINGDDP_STATUS_FD"
	// EnvRestart is how many times the job was restarted before this
	// attempt: 0 in the first (TORCHELASTIC_RESTART_COUNT's meaning).
	EnvRestart = "RINGDDP_RESTART"
)

// Status is a rank's end of the status pipe. A nil *Status (no launcher
// pipe) reports nothing. Reporting never fails the rank: a launcher that
// stopped reading only loses the reports.
type Status struct {
	f *os.File
}

// OpenStatus opens the status pipe RINGDDP_STATUS_FD names (read with
// getenv); nil, nil when it names none.
func OpenStatus(getenv func(string) string) (*Status, error) {
	v := strings.TrimSpace(getenv(EnvStatusFD))
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want the number of an inherited descriptor (3 or more)", EnvStatusFD, v)
	}
	f := os.NewFile(uintptr(fd), "ringddp-status")
	if f == nil {
		return nil, fmt.Errorf("%s=%d: no such descriptor", EnvStatusFD, fd)
	}
	return &Status{f: f}, nil
}

// Started reports that training begins at global step step.
func (s *Status) Started(step int64) { s.line("start", step) }

// Resumed reports that the survivors of a failure go on from global step
// step (survive.go); reshardSent, under ZeRO-1, is the bytes each rank
// sent to re-shard the optimizer state (nil under DDP).
func (s *Status) Resumed(step int64, reshardSent []int64) {
	if reshardSent == nil {
		s.line("resume", step)
		return
	}
	var sum int64
	for _, n := range reshardSent {
		sum += n
	}
	s.line("resume", step, sum)
	for r, n := range reshardSent {
		s.line("reshard", int64(r), n)
	}
}

// Stepped reports that global step step is done.
func (s *Status) Stepped(step int64) { s.line("step", step) }

func (s *Status) line(kind string, nums ...int64) {
	if s == nil {
		return
	}
	b := []byte(kind)
	for _, n := range nums {
		b = strconv.AppendInt(append(b, ' '), n, 10)
	}
	_, _ = s.f.Write(append(b, '\n'))
}

// Close closes the pipe.
func (s *Status) Close() error {
	if s == nil {
		return nil
	}
	return s.f.Close()
}

// progress is what the launcher has read from an attempt's status pipe.
type progress struct {
	mu        sync.Mutex
	start     int64     // the step the attempt started at (-1: not reported)
	last      int64     // the last step reported done (start until one is)
	trainedAt time.Time // when the first step was reported (zero: none yet)
	lastAt    time.Time // when the last step was reported (zero: none yet)
	resumed   int64     // the step survivors last went on from (-1: none)
	resumedAt time.Time // when they said so
	reshard   int64     // the bytes their ZeRO-1 re-shard sent (-1: none reported, DDP)
	// reshardSent is each rank's part of reshard, from the "reshard"
	// lines after the resume, in rank order; sentBad is set by a line out
	// of order or without a ZeRO-1 resume before it.
	reshardSent []int64
	sentBad     bool
	notify      chan struct{}
	done        chan struct{} // closed when the pipe reached its end
}

// maxReshardParts bounds the "reshard" lines kept after a resume (a rank
// a line): a pipe that sends more is not believed (8 MiB of parts).
const maxReshardParts = 1 << 20

func newProgress() *progress {
	return &progress{start: -1, last: -1, resumed: -1, reshard: -1, notify: make(chan struct{}, 1), done: make(chan struct{})}
}

// statusLine reads a status line: its kind and one or more numbers, none
// negative; ok false for a line that is not one.
func statusLine(line string) (kind string, nums []int64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 {
		return "", nil, false
	}
	for _, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return "", nil, false
		}
		nums = append(nums, n)
	}
	return f[0], nums, true
}

// read reads r's lines until its end, ignoring lines it does not know.
func (p *progress) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		kind, nums, ok := statusLine(sc.Text())
		if !ok || (kind != "resume" && kind != "reshard" && len(nums) != 1) || (kind == "reshard" && len(nums) != 2) {
			continue
		}
		step := nums[0]
		p.mu.Lock()
		switch kind {
		case "start":
			p.start = step
			p.last = max(p.last, step)
		case "resume":
			p.resumed, p.resumedAt, p.reshard = step, time.Now(), -1
			p.reshardSent, p.sentBad = nil, false
			if len(nums) == 2 {
				p.reshard = nums[1]
			}
		case "reshard": // step is the rank
			if p.reshard < 0 || step != int64(len(p.reshardSent)) || step >= maxReshardParts {
				p.sentBad = true
				break
			}
			p.reshardSent = append(p.reshardSent, nums[1])
		case "step":
			p.last = step
			p.lastAt = time.Now()
			if p.trainedAt.IsZero() {
				p.trainedAt = time.Now()
				select {
				case p.notify <- struct{}{}:
				default:
				}
			}
		}
		p.mu.Unlock()
	}
}

// snapshot returns the start, the last step and when training was first
// seen.
func (p *progress) snapshot() (start, last int64, trainedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start, p.last, p.trainedAt
}

// lastStepAt is when the last step was reported (zero: none yet).
func (p *progress) lastStepAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastAt
}

// lastResume is the step survivors last went on from, when they said so
// (-1 and zero: never), the bytes their ZeRO-1 re-shard sent (-1: none
// reported) and each rank's part, by rank (nil: not reported, out of
// order, or not summing to reshard).
func (p *progress) lastResume() (step int64, at time.Time, reshard int64, sent []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum int64
	for _, n := range p.reshardSent {
		sum += n
	}
	if !p.sentBad && len(p.reshardSent) > 0 && sum == p.reshard {
		sent = slices.Clone(p.reshardSent)
	}
	return p.resumed, p.resumedAt, p.reshard, sent
}
