package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/trace"
)

// timeline is -trace FILE: each rank's collectives as Chrome trace events
// (internal/trace), one track per rank. In process every rank's events go
// into FILE; a tcp or shm rank process writes its part, trace.RankFile,
// on rank 0's clock (its offset estimated by trace.SyncClock before any
// group uses its endpoint), and the launcher merges the parts into FILE.
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
