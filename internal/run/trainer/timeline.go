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
// timeline (nil: none) and its clock's offset from rank 0's.
type rankEnv struct {
	rec    *trace.Recorder
	offset time.Duration
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

// bucketObserver puts a rank's buckets on its timeline (ddp.Observer,
// ddp.PhaseObserver, zero.GatherObserver).
type bucketObserver struct{ rec *trace.Recorder }

func bucketName(b int) string { return "bucket " + strconv.Itoa(b) }

func (o bucketObserver) BucketReady(b, bytes int, t time.Time) {
	o.rec.InstantAt(trace.Compute, "ddp", bucketName(b)+" ready", trace.Int("bytes", int64(bytes)), t)
}

func (o bucketObserver) BucketReduced(b, bytes int, collective string, start, end time.Time, err error) {
	sp := o.rec.BeginAt(trace.Comm, "collective", bucketName(b), start).Str("collective", collective).Int("bytes", int64(bytes))
	if err != nil {
		sp = sp.Str("error", err.Error())
	}
	sp.EndAt(end)
}

func (o bucketObserver) BucketPhase(b int, phase string, start, end time.Time) {
	o.rec.BeginAt(trace.Comm, "phase", phase, start).Int("bucket", int64(b)).EndAt(end)
}

func (o bucketObserver) ParamsGathered(b, bytes int, start, end time.Time, err error) {
	sp := o.rec.BeginAt(trace.Comm, "collective", "all-gather params "+strconv.Itoa(b), start).Int("bytes", int64(bytes))
	if err != nil {
		sp = sp.Str("error", err.Error())
	}
	sp.EndAt(end)
}
