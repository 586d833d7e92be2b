package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/trace"
)

// timeline is -trace FILE: each rank's collectives as Chrome trace events
// (internal/trace), one track per rank. In process every rank's events go
// into FILE; a tcp or shm rank process writes its part, trace.RankFile,
// on rank 0's clock (its offset estimated by trace.SyncClock before any
// group uses its endpoint), and node 0's launcher merges the parts it
// finds into FILE (merge).
type timeline struct {
	path   string
	offset time.Duration // this process's clock ahead of rank 0's

	mu   sync.Mutex
	recs map[int]*trace.Recorder
}

// newTimeline is the timeline of -trace path, nil without one.
func newTimeline(path string) *timeline {
	if path == "" {
		return nil
	}
	return &timeline{path: path, recs: map[int]*trace.Recorder{}}
}

// syncClock aligns this rank process's clock with rank 0's over conn,
// which no group may have used yet.
func (t *timeline) syncClock(ctx context.Context, conn transport.Conn) error {
	if t == nil {
		return nil
	}
	off, _, err := trace.SyncClock(ctx, conn, trace.DefaultRounds, nil)
	if err != nil {
		return fmt.Errorf("-trace: aligning clocks with rank 0: %w", err)
	}
	t.offset = off
	return nil
}

// recorder is rank's recorder, the same for every sweep of the run; nil
// (which records nothing) without -trace.
func (t *timeline) recorder(rank int) *trace.Recorder {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.recs[rank]
	if !ok {
		r = trace.NewRecorder(rank)
		r.SetOffset(t.offset)
		t.recs[rank] = r
	}
	return r
}

// write writes this process's ranks' events: FILE in process, the rank
// file in a rank process (rankProcess).
func (t *timeline) write(rankProcess bool) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ranks := make([]int, 0, len(t.recs))
	for r := range t.recs {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var recs []*trace.Recorder
	for _, r := range ranks {
		recs = append(recs, t.recs[r])
	}
	path := t.path
	if rankProcess && len(ranks) == 1 {
		path = trace.RankFile(t.path, ranks[0])
	}
	if err := trace.WriteFile(path, recs...); err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	return nil
}

// merge, in a tcp job's launcher (mp) once the job succeeded, puts the
// rank files together; notes are written to stderr. Node 0's launcher
// (the only one on one host) merges every part it finds into FILE: on a
// filesystem the nodes share, every rank's, since each node's ranks have
// written theirs and exited before that node's launcher reports the
// attempt's end, which node 0's waits for. A part of one of its own ranks
// that is missing is an error; another node's is not (the part is on that
// node's disk, a trace file of its own): node 0 says which. The launcher
// of another node leaves its ranks' parts to node 0 and says where they
// are.
func (t *timeline) merge(mp *launch.Setup, stderr io.Writer) error {
	if mp.NodeRank != 0 {
		first := mp.NodeRank * mp.LocalRanks
		fmt.Fprintf(stderr, "-trace: node %d's ranks %s wrote %s; node 0's launcher merges them into %s if it shares this filesystem\n",
			mp.NodeRank, rankRange(first, mp.LocalRanks), rankFiles(t.path, first, mp.LocalRanks), t.path)
		return nil
	}
	missing, err := trace.MergeFound(t.path, mp.WorldSize)
	if err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	var own, others []string
	for _, r := range missing {
		if r < mp.LocalRanks {
			own = append(own, trace.RankFile(t.path, r))
		} else {
			others = append(others, strconv.Itoa(r))
		}
	}
	if len(own) > 0 {
		return fmt.Errorf("-trace: %s merged without %s: this node's ranks did not write them", t.path, strings.Join(own, ", "))
	}
	if len(others) > 0 {
		fmt.Fprintf(stderr, "-trace: %s holds the ranks whose parts are on this host; ranks %s wrote theirs on their own hosts (%s.rank<r> there, each a trace of its own)\n",
			t.path, strings.Join(others, ", "), t.path)
	}
	return nil
}

// rankRange words n ranks from first: "2", "2..3".
func rankRange(first, n int) string {
	if n == 1 {
		return strconv.Itoa(first)
	}
	return strconv.Itoa(first) + ".." + strconv.Itoa(first+n-1)
}

// rankFiles names the rank files of n ranks from first.
func rankFiles(path string, first, n int) string {
	if n == 1 {
		return trace.RankFile(path, first)
	}
	return trace.RankFile(path, first) + " .. " + trace.RankFile(path, first+n-1)
}
