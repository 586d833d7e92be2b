package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The endpoints of Config.Overlap: which ranks the local one carries, as
// package mixed says it, and ConnOf.
func TestOverlapEndpoints(t *testing.T) {
	type members interface{ LocalEndpointMembers() []int }
	w := newWorld(t, sim.Config{Ranks: 5, LocalSize: 2, Overlap: true})
	for r, want := range [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}, nil} {
		e := w.Endpoints()[r]
		m, ok := e.(members)
		require.True(t, ok, "rank %d's endpoint does not say its local members", r)
		require.Equal(t, want, m.LocalEndpointMembers(), "rank %d", r)
		c, ok := sim.ConnOf(e)
		require.True(t, ok)
		require.Same(t, w.Conn(r), c)
	}
	plain := newWorld(t, sim.Config{Ranks: 4, LocalSize: 2})
	_, ok := plain.Endpoints()[0].(members)
	require.False(t, ok, "a world without Overlap has two endpoints per rank")
	c, ok := sim.ConnOf(plain.Endpoints()[1])
	require.True(t, ok)
	require.Same(t, plain.Conn(1), c)
	_, ok = sim.ConnOf(nil)
	require.False(t, ok)
}

// A split clock on hand-computed times: each endpoint sends by its own
// clock and egress, PostClock and AwaitClock hand a time over, and
// JoinClock takes the later.
func TestEndpointClocks(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 4, LocalSize: 2, Overlap: true, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma}})
	c := w.Conn(0)
	const n = 1000
	// Without a split, the hand-over is nothing.
	c.PostClock(true)
	require.NoError(t, c.AwaitClock(bg, false))
	near(t, 0, c.Now(), "no split")

	c.SplitClock()
	send(t, w, 0, 1, hdr(0), 100*n) // the local endpoint: 100n·β_intra
	send(t, w, 0, 2, hdr(0), n)     // the other, at once: n·β_inter
	local, other := 100*n*intra.Beta, n*inter.Beta
	require.Greater(t, local, other)
	near(t, local, c.Now(), "split: the later of the two")
	recvPlace(t, w, 2, 0, hdr(0), n)
	near(t, inter.Alpha+other, w.Now(2), "the other endpoint's message left at 0")

	c.PostClock(true) // the other endpoint waits for the local one
	require.NoError(t, c.AwaitClock(bg, false))
	send(t, w, 0, 3, hdr(1), n)
	recvPlace(t, w, 3, 0, hdr(1), n)
	near(t, local+inter.Alpha+other, w.Now(3), "after the hand-over")

	err := c.AlignClocks(bg)
	require.ErrorIs(t, err, transport.ErrInvalid)
	require.Contains(t, err.Error(), "split")
	err = c.Exchange(bg, 1, hdr(2), make([]byte, 4), 2, hdr(2), 4, &sink{})
	require.ErrorIs(t, err, transport.ErrInvalid)
	require.Contains(t, err.Error(), "one on this rank's node and one off it")

	c.JoinClock()
	near(t, local+other, c.Now(), "joined")
	send(t, w, 0, 1, hdr(3), n) // one clock again: after both
	recvPlace(t, w, 1, 0, hdr(0), 100*n)
	recvPlace(t, w, 1, 0, hdr(3), n)
	near(t, local+other+intra.Alpha+n*intra.Beta, w.Now(1), "a call after the join")
}

// Two endpoints that wait for each other's time, while another rank waits
// for one of them, are a deadlock, found at once and named.
func TestDeadlockAwaitClock(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 4, LocalSize: 2, Overlap: true, Timeout: time.Minute})
	c := w.Conn(0)
	c.SplitClock()
	defer c.JoinClock()
	start := time.Now()
	res := []<-chan error{
		goErr(func() error { return c.AwaitClock(bg, true) }),
		goErr(func() error { return c.AwaitClock(bg, false) }),
		goErr(func() error { return w.Conn(1).Recv(bg, 0, hdr(0), 8, &sink{}) }),
		goErr(func() error { return w.Conn(2).AlignClocks(bg) }),
		goErr(func() error { return w.Conn(3).AlignClocks(bg) }),
	}
	for i, ch := range res {
		err := wait(t, ch, 10*time.Second)
		require.ErrorIs(t, err, transport.ErrTimeout, "call %d", i)
		var dl *sim.DeadlockError
		require.ErrorAs(t, err, &dl)
		require.Contains(t, err.Error(), "rank 0 waits for its other endpoint's time (a pipelined composition's stage); rank 0 waits for its other endpoint's time")
		require.Contains(t, err.Error(), "rank 1 waits for a message from rank 0")
	}
	require.Less(t, time.Since(start), 5*time.Second, "the deadlock was found by the timeout, not at once")
}

// Hierarchical and torus over two endpoints per rank (Config.Overlap)
// run their blocks pipelined, pipeline.go's own schedule on the
// simulator: with real payloads every rank ends with the sequential
// reference, bitwise; the clocks are the same run after run and in
// timing-only mode (deterministic, with two goroutines per rank); and on
// several nodes the time is less than with one endpoint per rank, which
// runs the same blocks one after the other. Nodes of 2, uneven nodes (the
// last of one rank, which has nothing to overlap; of 3 and 1) and one
// node. 2 Mi + 3 floats: two blocks. Under -short only the first two
// layouts (4 s of the 8 s on a loaded 2-core machine); under -race only
// 2 × 2 and timing-only (real payloads took 10 s there; the goroutines
// and the clocks are the same).
func TestPipelinedAlgorithms(t *testing.T) {
	const count = 2<<20 + 3
	layouts := []struct{ n, local int }{{4, 2}, {5, 2}, {7, 3}, {4, 0}}
	real := !raceEnabled || scale()
	switch {
	case !real:
		layouts = layouts[:1]
	case testing.Short():
		layouts = layouts[:2]
	}
	for _, algo := range []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%v/ranks=%d/local=%d", algo, l.n, l.local), func(t *testing.T) {
				cfg := costs(l.n, l.local, !real)
				cfg.Overlap = true
				run := func(cfg sim.Config) []float64 {
					w := newWorld(t, cfg)
					if cfg.TimingOnly {
						return allReduce(t, w, algo, virtualBufs(w, count))
					}
					bufs, ref := realBufs(l.n, count)
					clocks := allReduce(t, w, algo, bufs)
					checkResult(t, bufs, ref)
					return clocks
				}
				first := run(cfg)
				sameClocks(t, "second run", first, run(cfg))
				virtual := cfg
				virtual.TimingOnly = true
				sameClocks(t, "timing-only", first, run(virtual))
				one := virtual
				one.Overlap = false
				serial := maxOf(run(one))
				switch {
				case l.local == 0 && maxOf(first) != serial:
					t.Errorf("one node: %.3f µs over two endpoints, %.3f µs over one", 1e6*maxOf(first), 1e6*serial)
				case l.local > 0 && maxOf(first) >= serial:
					t.Errorf("%.3f µs over two endpoints, not less than over one (%.3f µs)", 1e6*maxOf(first), 1e6*serial)
				}
				t.Logf("%.3f µs pipelined, %.3f µs one block after the other", 1e6*maxOf(first), 1e6*serial)
			})
		}
	}
}
