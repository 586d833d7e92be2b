package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// nicWorld is 4 ranks on 2 nodes of 2, whose ranks share nics NICs per
// node, with ports egress ports per rank.
func nicWorld(t *testing.T, nics, ports int) *sim.World {
	return newWorld(t, sim.Config{Ranks: 4, LocalSize: 2, Timeout: 10 * time.Second, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma, NICs: nics, Ports: ports}})
}

// runPrograms runs one program per rank of w, each on its own goroutine
// and ending in AlignClocks (a rank that stops calling would hold up its
// NIC), and returns every rank's clock from before AlignClocks.
func runPrograms(t *testing.T, w *sim.World, programs ...func(c *sim.Conn) error) []float64 {
	t.Helper()
	clocks := make([]float64, len(programs))
	done := make([]<-chan error, len(programs))
	for r, p := range programs {
		done[r] = goErr(func() error {
			c := w.Conn(r)
			if err := p(c); err != nil {
				return err
			}
			clocks[r] = c.Now()
			return c.AlignClocks(bg)
		})
		if r == 1 {
			time.Sleep(20 * time.Millisecond) // rank 1 reaches the NIC first in real time
		}
	}
	for r := range done {
		require.NoError(t, wait(t, done[r], 5*time.Second), "rank %d", r)
	}
	return clocks
}

// sendBoth has ranks 0 and 1 (node 0) each send n bytes to node 1 (0 → 2,
// 1 → 3) after advancing their clocks by lead0 and lead1, rank 1 first in
// real time, so that the NIC must not serve them in the order they came,
// and returns every rank's clock.
func sendBoth(t *testing.T, w *sim.World, n int, lead0, lead1 float64) []float64 {
	t.Helper()
	sender := func(to int, lead float64) func(c *sim.Conn) error {
		return func(c *sim.Conn) error {
			c.Advance(lead)
			return c.Send(bg, to, hdr(0), make([]byte, n))
		}
	}
	receiver := func(from int) func(c *sim.Conn) error {
		return func(c *sim.Conn) error { return c.Recv(bg, from, hdr(0), n, &placer{dst: make([]byte, n)}) }
	}
	return runPrograms(t, w, sender(2, lead0), sender(3, lead1), receiver(0), receiver(1))
}

// TestSharedNIC: messages leaving a node through one NIC go one at a
// time, in the order they were ready (then by rank), whatever order the
// goroutines reached the NIC in; with a NIC per rank they go at once; a
// message within the node does not use the NIC.
func TestSharedNIC(t *testing.T) {
	const n = 1000
	tx := n * inter.Beta
	t.Run("one NIC, ready together", func(t *testing.T) {
		clocks := sendBoth(t, nicWorld(t, 1, 0), n, 0, 0)
		near(t, inter.Alpha+tx, clocks[2], "rank 0's message (lower rank first)")
		near(t, inter.Alpha+2*tx, clocks[3], "rank 1's message, after rank 0's")
		near(t, 2*tx, clocks[1], "rank 1 busy until its message left (Ports 0)")
	})
	t.Run("one NIC, rank 1 ready first", func(t *testing.T) {
		clocks := sendBoth(t, nicWorld(t, 1, 0), n, tx/4, 0)
		near(t, inter.Alpha+tx, clocks[3], "rank 1's message, ready first")
		near(t, tx+inter.Alpha+tx, clocks[2], "rank 0's message, after rank 1's")
	})
	t.Run("two NICs", func(t *testing.T) {
		clocks := sendBoth(t, nicWorld(t, 2, 0), n, 0, 0)
		near(t, inter.Alpha+tx, clocks[2], "rank 0's message")
		near(t, inter.Alpha+tx, clocks[3], "rank 1's message, on its own NIC")
	})
	t.Run("ports: the rank goes on when ready", func(t *testing.T) {
		clocks := sendBoth(t, nicWorld(t, 1, 2), n, 0, 0)
		near(t, inter.Alpha+2*tx, clocks[3], "rank 1's message, after rank 0's")
		near(t, 0, clocks[1], "rank 1 handed it to a port")
	})
	t.Run("within the node", func(t *testing.T) {
		clocks := runPrograms(t, nicWorld(t, 1, 0),
			func(c *sim.Conn) error {
				if err := c.Send(bg, 1, hdr(0), make([]byte, n)); err != nil {
					return err
				}
				return c.Send(bg, 2, hdr(1), make([]byte, n))
			},
			func(c *sim.Conn) error { return c.Recv(bg, 0, hdr(0), n, &placer{dst: make([]byte, n)}) },
			func(c *sim.Conn) error { return c.Recv(bg, 0, hdr(1), n, &placer{dst: make([]byte, n)}) },
			func(c *sim.Conn) error { return nil })
		near(t, intra.Alpha+n*intra.Beta, clocks[1], "intra-node message")
		near(t, n*intra.Beta+inter.Alpha+tx, clocks[2], "inter-node message after it (egress)")
	})
}

// TestSharedNICWaitsForSlowerRank: a request waits while another rank of
// its NIC could still ask for an earlier slot, and goes on when that rank
// closes; if it never does, the request fails at the real-time timeout,
// naming the NIC.
func TestSharedNICWaitsForSlowerRank(t *testing.T) {
	cfg := sim.Config{Ranks: 4, LocalSize: 2, Timeout: 300 * time.Millisecond, Model: cost.Model{Intra: intra, Inter: inter, NICs: 1}}
	w := newWorld(t, cfg)
	w.Conn(0).Advance(1)
	err := w.Conn(0).Send(bg, 2, hdr(0), make([]byte, 8)) // rank 1 (clock 0) never calls
	var te *transport.TimeoutError
	require.ErrorAs(t, err, &te)
	require.Contains(t, err.Error(), "NIC")

	w = newWorld(t, cfg)
	w.Conn(0).Advance(1)
	done := goErr(func() error { return w.Conn(0).Send(bg, 2, hdr(0), make([]byte, 8)) })
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, w.Conn(1).Close())
	require.NoError(t, wait(t, done, 5*time.Second))

	// Aborting a waiting rank fails its send with its cause.
	w = newWorld(t, cfg)
	w.Conn(0).Advance(1)
	done = goErr(func() error { return w.Conn(0).Send(bg, 2, hdr(0), make([]byte, 8)) })
	time.Sleep(50 * time.Millisecond)
	cause := errors.New("killed by the test")
	w.Kill(0, cause)
	require.ErrorIs(t, wait(t, done, 5*time.Second), cause)

	// So does its context.
	w = newWorld(t, cfg)
	w.Conn(0).Advance(1)
	ctx, cancel := context.WithCancel(bg)
	done = goErr(func() error { return w.Conn(0).Send(ctx, 2, hdr(0), make([]byte, 8)) })
	time.Sleep(50 * time.Millisecond)
	cancel()
	require.ErrorIs(t, wait(t, done, 5*time.Second), context.Canceled)
}

// allReduceAligned is allReduce with every rank ending in AlignClocks, as
// a program on shared NICs must (a rank that stops calling holds up its
// NIC), and returns the aligned clock.
func allReduceAligned(t *testing.T, w *sim.World, algo allreduce.Algorithm, bufs [][]float32) float64 {
	t.Helper()
	errs := allreducetest.RunRanks(w.Endpoints(), func(g *allreduce.Group) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := allreduce.AllReduce(ctx, g, bufs[g.Rank()], allreduce.Sum); err != nil {
			return err
		}
		return w.Conn(g.Rank()).AlignClocks(ctx)
	}, allreduce.WithAlgorithm(algo))
	allreducetest.RequireNoErrors(t, errs)
	return w.MaxNow()
}

// TestSharedNICAlgorithms: every algorithm on shared NICs gives the
// reference result, the same virtual time run after run (the NICs serve
// in virtual-time order whatever the goroutines do) and in timing-only
// mode, and no less time than with a link per rank; the algorithms that
// send from every rank of a node at once (halving-doubling past the
// node, torus and mesh between nodes) take longer, and hierarchical,
// which sends from one rank per node, takes no longer.
func TestSharedNICAlgorithms(t *testing.T) {
	const n, local, count = 12, 4, 1 << 18
	for _, algo := range []allreduce.Algorithm{allreduce.Ring, allreduce.Doubling, allreduce.HalvingDoubling, allreduce.Tree, allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh} {
		t.Run(algo.String(), func(t *testing.T) {
			run := func(nics int, timingOnly bool) float64 {
				cfg := costs(n, local, timingOnly)
				cfg.NICs = nics
				w := newWorld(t, cfg)
				if timingOnly {
					return allReduceAligned(t, w, algo, virtualBufs(w, count))
				}
				bufs, ref := realBufs(n, count)
				end := allReduceAligned(t, w, algo, bufs)
				checkResult(t, bufs, ref)
				return end
			}
			// Under the race detector one run has real payloads (six took
			// 260 s of it), the others time only, which the last check
			// shows gives the same virtual time.
			repeats, real := 3, !raceEnabled || scale()
			if !real {
				repeats = 1
			}
			alone := run(0, !real)
			shared := run(1, false)
			for i := range repeats {
				require.Equal(t, shared, run(1, !real), "run %d", i+2)
			}
			require.Equal(t, shared, run(1, true), "timing-only")
			require.GreaterOrEqual(t, shared, alone)
			switch algo {
			case allreduce.HalvingDoubling, allreduce.Torus, allreduce.Mesh:
				require.Greater(t, shared, alone, "every rank of a node crosses at once")
			case allreduce.Hierarchical:
				require.Equal(t, alone, shared, "one rank per node crosses")
			}
			t.Logf("%v: %.2f µs with a link per rank, %.2f µs on one NIC per node", algo, 1e6*alone, 1e6*shared)
		})
	}
}

// TestSharedNICScale: the ring and halving-doubling on 1024 ranks, 128
// nodes of 8 sharing one NIC each, timing-only: deterministic, and the
// ring (one rank of a node crosses at a time) as fast as without sharing.
func TestSharedNICScale(t *testing.T) {
	if (testing.Short() || raceEnabled) && !scale() {
		t.Skip("1024 ranks: -short or -race (RINGDDP_SIM_SCALE=1 runs it)")
	}
	for _, algo := range []allreduce.Algorithm{allreduce.Ring, allreduce.HalvingDoubling} {
		run := func(nics int) float64 {
			cfg := costs(1024, 8, true)
			cfg.SlowRank, cfg.SlowFactor, cfg.SlowLinks = -1, 0, nil
			cfg.NICs = nics
			w := newWorld(t, cfg)
			return allReduceAligned(t, w, algo, virtualBufs(w, 1<<22))
		}
		start := time.Now()
		shared := run(1)
		took := time.Since(start)
		require.Equal(t, shared, run(1), fmt.Sprintf("%v: second run", algo))
		alone := run(0)
		if algo == allreduce.Ring {
			require.Equal(t, alone, shared)
		} else {
			require.Greater(t, shared, alone)
		}
		t.Logf("%v, 1024 ranks, 16 MiB: %.1f µs alone, %.1f µs shared (simulated in %v)", algo, 1e6*alone, 1e6*shared, took)
	}
}
