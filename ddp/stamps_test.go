package ddp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/ddp"
)

// countingObserver counts what a DDP reports.
type countingObserver struct {
	mu                     sync.Mutex
	ready, reduced, phases int
	names                  map[string]bool
}

func (o *countingObserver) BucketReady(b, bytes int, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ready++
}

func (o *countingObserver) BucketReduced(b, bytes int, name string, start, end time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reduced++
	if o.names == nil {
		o.names = map[string]bool{}
	}
	o.names[name] = true
	if end.Before(start) {
		panic("bucket ends before it starts")
	}
}

func (o *countingObserver) BucketPhase(b int, phase string, start, end time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.phases++
}

// TestArrivalStampsNameTheLateRank gives one rank a clock an hour ahead,
// so that its stamps say it handed in its last bucket an hour after the
// others: every rank's agreement names it, an hour (within a second) after
// the rank before it, in-process (direct) and over the ring (the stamps
// ride the last chunk), and the observer sees every bucket.
func TestArrivalStampsNameTheLateRank(t *testing.T) {
	const n, steps, late = 3, 20, 1
	const ahead = time.Hour
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "ring"}[plain], func(t *testing.T) {
			w, err := inproc.NewWorld(n)
			require.NoError(t, err)
			conns := make([]transport.Conn, n)
			for r := range conns {
				conns[r] = w.Conn(r)
				if plain {
					conns[r] = plainConn{conns[r]}
				}
			}
			lasts := make([][]int, n)
			lags := make([][]time.Duration, n)
			obs := make([]*countingObserver, n)
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				r := g.Rank()
				obs[r] = &countingObserver{}
				now := func() int64 {
					if r == late {
						return time.Now().Add(ahead).UnixMicro()
					}
					return time.Now().UnixMicro()
				}
				net, d := newLinearNet(t, g, []int{40000, 30000}, 7,
					ddp.WithAgreement(func() bool { return false }), ddp.WithArrivalStamps(now),
					ddp.WithObserver(obs[r]), ddp.WithBucketBytes(100000, 100000))
				for range steps {
					if err := d.Run(context.Background(), net.vm); err != nil {
						return err
					}
					a := d.Agreed()
					if !a.Stamped {
						t.Errorf("rank %d: agreement not stamped", r)
					}
					if got := d.Arrivals(); len(got) != n {
						t.Errorf("rank %d: %d arrivals", r, len(got))
					}
					lasts[r] = append(lasts[r], a.Last)
					lags[r] = append(lags[r], a.Lag)
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := range n {
				require.Equal(t, lasts[0], lasts[r], "rank %d's view of the last ranks", r)
				require.Equal(t, lags[0], lags[r], "rank %d's view of the lags", r)
				buckets := 2
				require.Equal(t, steps*buckets, obs[r].ready, "rank %d's ready buckets", r)
				require.Equal(t, steps*buckets, obs[r].reduced, "rank %d's reduced buckets", r)
			}
			for i, l := range lasts[0] {
				require.Equal(t, late, l, "step %d's last rank", i)
				require.InDelta(t, float64(ahead), float64(lags[0][i]), float64(time.Second), "step %d's lag", i)
			}
			if plain {
				require.Positive(t, obs[0].phases, "the ring's phases reported")
			}
		})
	}
}
