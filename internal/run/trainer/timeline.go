package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/trace"
)

// The timeline (Config.Trace): every rank records its steps (forward,
// backward, the wait for the buckets, the optimizer), its buckets (when
// each was ready, each collective with its name, bytes and phases),
// evaluation and checkpoints into a trace.Recorder; Run writes them into
// one Chrome trace file. Ranks in other processes are put on rank 0's
// clock first (syncClocks), which the straggler stamps use too.

// rankEnv is what a rank runs with besides its configuration: its
// timeline (nil: none), its clock's offset from rank 0's, and where its
// replica's observer puts the bucket collectives' spans (newWorker sets
// it).
type rankEnv struct {
	rec    *trace.Recorder
	offset time.Duration
	spans  *commSpans
}

// clocks are this process's ranks' offsets from rank 0's clock.
type clocks struct {
	offset []time.Duration // by index in conns
}

// syncClocks estimates every endpoint's clock offset from rank 0's
// (trace.SyncClock), on endpoints no group has used yet. In-process ranks
// share one clock: when this process holds the whole world there is
// nothing to do.
func syncClocks(ctx context.Context, conns []transport.Conn) (clocks, error) {
	c := clocks{offset: make([]time.Duration, len(conns))}
	if len(conns) == 0 || len(conns) >= conns[0].Size() {
		return c, nil
	}
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.offset[i], _, errs[i] = trace.SyncClock(ctx, conn, trace.DefaultRounds, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("trainer: aligning clocks with rank 0: %w", err)
	}
	return c, nil
}

// stampClock is the shared clock in microseconds of a rank whose clock is
// offset ahead of rank 0's.
func stampClock(offset time.Duration) func() int64 {
	return func() int64 { return time.Now().Add(-offset).UnixMicro() }
}

// traceFile is where this process writes its ranks' timeline: the path
// itself when it holds every rank, else the part of its lowest rank
// (trace.RankFile), which the launcher merges.
func traceFile(path string, ranks []int, world int) string {
	if len(ranks) >= world || len(ranks) == 0 {
		return path
	}
	return trace.RankFile(path, slices.Min(ranks))
}

// commSpans are the spans of one step's bucket collectives, to measure
// how much of them the backward pass hid. The communication goroutine adds
// them (bucketObserver.BucketReduced); the rank's goroutine takes them
// after ddp's Run returned, which waited for that goroutine, so the two
// never touch the slice at once.
type commSpans struct{ spans [][2]time.Time }

func (c *commSpans) add(start, end time.Time) {
	if c != nil {
		c.spans = append(c.spans, [2]time.Time{start, end})
	}
}

// hidden is how long the spans added since the last call ran inside
// [from, to], the step's forward and backward pass: the communication
// the backward pass hid. It forgets the spans.
func (c *commSpans) hidden(from, to time.Time) time.Duration {
	if c == nil {
		return 0
	}
	var d time.Duration
	for _, s := range c.spans {
		lo, hi := maxTime(s[0], from), minTime(s[1], to)
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	c.spans = c.spans[:0]
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// bucketObserver puts a rank's buckets on its timeline, if it has one
// (rec), and their collectives' spans into spans (ddp.Observer,
// ddp.PhaseObserver, zero.GatherObserver).
type bucketObserver struct {
	rec   *trace.Recorder
	spans *commSpans
}

func bucketName(b int) string { return "bucket " + strconv.Itoa(b) }

func (o bucketObserver) BucketReady(b, bytes int, t time.Time) {
	if o.rec == nil {
		return
	}
	o.rec.InstantAt(trace.Compute, "ddp", bucketName(b)+" ready", trace.Int("bytes", int64(bytes)), t)
}

func (o bucketObserver) BucketReduced(b, bytes int, collective string, start, end time.Time, err error) {
	o.spans.add(start, end)
	if o.rec == nil {
		return
	}
	sp := o.rec.BeginAt(trace.Comm, "collective", bucketName(b), start).Str("collective", collective).Int("bytes", int64(bytes))
	if err != nil {
		sp = sp.Str("error", err.Error())
	}
	sp.EndAt(end)
}

func (o bucketObserver) BucketPhase(b int, phase string, start, end time.Time) {
	if o.rec == nil {
		return
	}
	o.rec.BeginAt(trace.Comm, "phase", phase, start).Int("bucket", int64(b)).EndAt(end)
}

// ParamsGathered: ZeRO-1's all-gather runs in Step, after the backward
// pass; the step counts it as exposed communication without its span.
func (o bucketObserver) ParamsGathered(b, bytes int, start, end time.Time, err error) {
	if o.rec == nil {
		return
	}
	sp := o.rec.BeginAt(trace.Comm, "collective", "all-gather params "+strconv.Itoa(b), start).Int("bytes", int64(bytes))
	if err != nil {
		sp = sp.Str("error", err.Error())
	}
	sp.EndAt(end)
}
