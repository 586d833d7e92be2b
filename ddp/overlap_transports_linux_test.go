package ddp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// dialRanks runs each training on fresh connections that dial makes, rank
// by rank, over one in-memory store.
func dialRanks(t *testing.T, dial func(ctx context.Context, store rendezvous.Store, ranks, r int) (transport.Conn, error)) ranksRunner {
	return func(ranks int, fn func(g *allreduce.Group) error) []error {
		store := rendezvous.NewMemStore()
		conns := make([]transport.Conn, ranks)
		errs := make([]error, ranks)
		var wg sync.WaitGroup
		for r := range conns {
			wg.Go(func() { conns[r], errs[r] = dial(context.Background(), store, ranks, r) })
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
		return allreducetest.RunRanks(conns, fn)
	}
}

var overlapSecret = []byte("ddp overlap test secret")

// TestOptimizerInBackwardOverTransports: over loopback TCP and shared
// memory (where Auto's direct all-reduce reads copies of the peers'
// buffers), 3 and 4 ranks, the optimizer in backward gives bitwise the
// parameters and state of the separate Step. About 1.5 s; 4 ranks only
// under -short; skipped under the race detector (6 s there; the
// in-process cases of TestOptimizerInBackwardInParts run under it).
func TestOptimizerInBackwardOverTransports(t *testing.T) {
	if raceEnabled {
		t.Skip("6 s under the race detector; the in-process cases cover the races")
	}
	transports := map[string]func(ctx context.Context, store rendezvous.Store, ranks, r int) (transport.Conn, error){
		"tcp": func(ctx context.Context, store rendezvous.Store, ranks, r int) (transport.Conn, error) {
			return tcp.Dial(ctx, tcp.Config{Rank: r, Size: ranks, Store: store, Secret: overlapSecret,
				Timeout: 20 * time.Second, ConnectTimeout: 20 * time.Second})
		},
		"shm": func(ctx context.Context, store rendezvous.Store, ranks, r int) (transport.Conn, error) {
			return shm.Dial(ctx, shm.Config{Rank: r, Size: ranks, Store: store, Secret: overlapSecret,
				Slots: 4, SlotSize: 64 << 10, Timeout: 20 * time.Second, ConnectTimeout: 20 * time.Second})
		},
	}
	ranks := []int{3, 4}
	if testing.Short() {
		ranks = ranks[1:]
	}
	for name, dial := range transports {
		for _, n := range ranks {
			for _, bucket := range []int{64, 1 << 20} {
				t.Run(fmt.Sprintf("%s/ranks=%d/bucket=%d", name, n, bucket), func(t *testing.T) {
					run := dialRanks(t, dial)
					want := trainOverlapOn(t, run, "mlp-odd", "adam", n, 2, bucket, false)
					got := trainOverlapOn(t, run, "mlp-odd", "adam", n, 2, bucket, true)
					requireSameTraining(t, want, got)
				})
			}
		}
	}
}
