package zero_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/optim"
)

// BenchmarkBuddyOverhead is the cost of buddies on a step, 4 ranks (and 2
// over tcp, where 2 cores give each rank its own), float32, 64 rows per
// rank, on two models: BenchmarkStep's (net=step: MLP 784-2048-2048-10,
// 5.8 M parameters, Adam) and cmd/train's default (net=train: MLP
// 784-256-128-10, 235 k parameters, SGD with momentum 0.9, global batch
// 256 with 4 ranks). Two worlds, ZeRO-1 with and without buddies, run
// in turns of burst steps each (b.N turns), so that the machine's load
// drifts over both alike. It reports each mode's median step and the
// overhead, median(buddy)/median(plain) - 1, and the same for the
// process's CPU time per step (all ranks), which a loaded machine's
// scheduling does not inflate as it does wall time.
func BenchmarkBuddyOverhead(b *testing.B) {
	const perRank = 64
	trainNet := benchNet{dims: []int{784, 256, 128, 10}, newOpt: func() (optim.Optimizer[float32], error) {
		return optim.NewSGD[float32](optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	}}
	for _, net := range []struct {
		name  string
		net   benchNet
		burst int
	}{{"step", stepNet, 2}, {"train", trainNet, 20}} {
		for _, c := range []struct {
			transport string
			ranks     int
		}{{"inproc", 4}, {"tcp", 4}, {"tcp", 2}} {
			b.Run(fmt.Sprintf("net=%s/transport=%s/ranks=%d", net.name, c.transport, c.ranks), func(b *testing.B) {
				buddyOverhead(b, net.net, benchConns(b, c.transport, c.ranks), benchConns(b, c.transport, c.ranks), perRank, net.burst)
			})
		}
	}
}

// buddyOverhead runs BenchmarkBuddyOverhead's two worlds of net, over
// plain and buddy, and reports.
func buddyOverhead(b *testing.B, net benchNet, plainConns, buddyConns []transport.Conn, perRank, burst int) {
	worlds := []*turnWorld{
		startTurns(b, plainConns, net, "zero1", perRank, burst),
		startTurns(b, buddyConns, net, "zero1-buddy", perRank, burst),
	}
	for _, w := range worlds { // warm-up turn, not timed
		w.turn()
	}
	for _, w := range worlds {
		w.times, w.cpu, w.steps = w.times[:0], 0, 0
	}
	b.ResetTimer()
	for range b.N {
		for _, w := range worlds {
			w.turn()
		}
	}
	b.StopTimer()
	for _, w := range worlds {
		require.NoError(b, w.stop())
	}
	plain, buddy := median(worlds[0].times), median(worlds[1].times)
	b.ReportMetric(float64(plain.Microseconds())/1e3, "zero1-ms/step")
	b.ReportMetric(float64(buddy.Microseconds())/1e3, "buddy-ms/step")
	b.ReportMetric(100*(float64(buddy)/float64(plain)-1), "overhead-%")
	cpuPlain := float64(worlds[0].cpu) / float64(worlds[0].steps)
	cpuBuddy := float64(worlds[1].cpu) / float64(worlds[1].steps)
	b.ReportMetric(cpuPlain/1e6, "zero1-cpu-ms/step")
	b.ReportMetric(cpuBuddy/1e6, "buddy-cpu-ms/step")
	b.ReportMetric(100*(cpuBuddy/cpuPlain-1), "cpu-overhead-%")
}

// turnWorld is a world of ranks that train burst steps each time it is
// given a turn; rank 0's step times are kept.
type turnWorld struct {
	tokens   []chan bool
	done     chan struct{}
	finished chan struct{} // closed when every rank has returned
	errs     []error
	times    []time.Duration
	cpu      time.Duration // the process's CPU time during this world's turns
	steps    int           // steps of those turns
	burst    int
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startTurns(b *testing.B, conns []transport.Conn, net benchNet, mode string, perRank, burst int) *turnWorld {
	w := &turnWorld{done: make(chan struct{}, len(conns)), finished: make(chan struct{}), burst: burst}
	for range conns {
		w.tokens = append(w.tokens, make(chan bool))
	}
	go func() {
		defer close(w.finished)
		w.errs = allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
			ctx := context.Background()
			step, release, err := benchNetRank(ctx, g, net, mode, perRank)
			if err != nil {
				return err
			}
			defer release()
			for range w.tokens[g.Rank()] {
				for range burst {
					start := time.Now()
					if err := step(); err != nil {
						return err
					}
					if g.Rank() == 0 {
						w.times = append(w.times, time.Since(start))
					}
				}
				w.done <- struct{}{}
			}
			return nil
		})
	}()
	return w
}

// turn lets every rank train one burst and waits for them (or for the
// world's end, when a rank failed).
func (w *turnWorld) turn() {
	before := cpuTime()
	defer func() { w.cpu += cpuTime() - before }()
	w.steps += w.burst
	for _, t := range w.tokens {
		select {
		case t <- true:
		case <-w.finished:
			return
		}
	}
	for range w.tokens {
		select {
		case <-w.done:
		case <-w.finished:
			return
		}
	}
}

func (w *turnWorld) stop() error {
	for _, t := range w.tokens {
		close(t)
	}
	<-w.finished
	return allreducetest.FirstError(w.errs)
}
