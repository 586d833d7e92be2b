package main

import (
	"context"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/sim"
)

// simConfig is the simulated world of a -transport sim run: its links and
// reduce cost are the run's model, the one its groups get (WithModel), so
// that Auto chooses by the machine it runs on.
func simConfig(cfg *config) sim.Config {
	m := *cfg.model
	return sim.Config{
		Ranks:     cfg.ranks,
		LocalSize: cfg.localSize,
		// The run's model (Segment is the schedules', which the world
		// ignores), the cache-work regime keyed on the collective's
		// bytes per rank.
		Model:           m,
		CollectiveBytes: allreduce.CollectiveBytes,
		SlowRank:        -1,
		Overlap:         cfg.simOverlap,
		TimingOnly:      cfg.virtualBytes() > 0,
		Timeout:         cfg.tr.Timeout,
	}
}

// virtualAt reports whether a row of size bytes runs timing-only (its
// payload accounted, not allocated, and not checked): -sim-payload none,
// or auto with ranks × bytes above simRealLimit.
func (c *config) virtualAt(size int) bool {
	if c.transport != simTransport {
		return false
	}
	switch c.payload {
	case payloadNone:
		return true
	case payloadReal:
		return false
	}
	return c.ranks > 0 && size > simRealLimit/c.ranks
}

// realCount is the element count of the largest row with real payloads
// (0 when there is none): the size of the ranks' real buffers.
func (c *config) realCount() int {
	n := 0
	for _, s := range c.sizes() {
		if !c.virtualAt(s) {
			n = max(n, c.count(s))
		}
	}
	return n
}

// virtualBytes is the byte size of the largest timing-only row (0 when
// there is none): how much of the simulator's virtual arena the ranks
// share.
func (c *config) virtualBytes() int {
	n := 0
	for _, s := range c.sizes() {
		if c.virtualAt(s) {
			n = max(n, c.count(s)*c.dtype.Size())
		}
	}
	return n
}

// virtualElems views the simulator's virtual arena as elements, for the
// typed collectives. Nothing reads or writes them (an access faults).
func virtualElems[T allreduce.Numeric](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// simClock is a simulated rank's clock: AlignClocks is a free barrier and
// the time is virtual; a collective ends with one too, which is where the
// simulator applies its cores bound (sim.Config.Cores).
type simClock struct{ c *sim.Conn }

func (k simClock) sync(ctx context.Context) error   { return k.c.AlignClocks(ctx) }
func (k simClock) finish(ctx context.Context) error { return k.c.AlignClocks(ctx) }
func (k simClock) now() float64                     { return k.c.Now() }

// simTally is how simulated ranks combine a size's figures: each writes
// its own slot, a free barrier (AlignClocks) makes every slot visible,
// and rank 0 reads them, instead of two all-reduces that would cost the
// simulator as much real time as a small row. A rank writes its slot
// again only after the next size's barrier, which rank 0 reaches after
// reading.
type simTally struct {
	times [][]float64 // each rank's times of the size's timed iterations
	wrong []int64
}

func newSimTally(ranks int) *simTally {
	return &simTally{times: make([][]float64, ranks), wrong: make([]int64, ranks)}
}

func (t *simTally) combine(ctx context.Context, c *sim.Conn, times []float64, wrong *int64) error {
	r := c.Rank()
	t.times[r] = times
	if wrong != nil {
		t.wrong[r] = *wrong
	}
	if err := c.AlignClocks(ctx); err != nil {
		return err
	}
	if r != 0 {
		return nil
	}
	for q := 1; q < len(t.times); q++ {
		for i, x := range t.times[q] {
			times[i] = max(times[i], x)
		}
		if wrong != nil {
			*wrong += t.wrong[q]
		}
	}
	return nil
}
