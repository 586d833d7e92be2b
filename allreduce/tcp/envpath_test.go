package tcp_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/internal/freeport"
)

// TestEnvToAllReduce follows the launcher's path on every rank: FromEnv,
// the TCP store hosted by rank 0, ConfigFromEnv, Dial, an all-reduce.
func TestEnvToAllReduce(t *testing.T) {
	const n = 3
	port := strconv.Itoa(freeport.Loopback(t))
	var wg sync.WaitGroup
	errs := make([]error, n)
	results := make([][]float32, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n),
				"LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": strconv.Itoa(n),
				"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RINGDDP_SECRET": "launcher-made-secret"}
			errs[r] = func() error {
				env, err := rendezvous.FromEnv(func(k string) string { return vars[k] })
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				store, err := rendezvous.Connect(ctx, env, "", rendezvous.StoreConfig{Timeout: 10 * time.Second})
				if err != nil {
					return err
				}
				defer store.Close()
				cfg := tcp.ConfigFromEnv(env, store)
				if cfg.ListenAddr != "127.0.0.1:0" {
					t.Errorf("rank %d listens on %s, want loopback", r, cfg.ListenAddr)
				}
				cfg.RunID = "env-test"
				conn, err := tcp.Dial(ctx, cfg)
				if err != nil {
					return err
				}
				if conn.LocalRank() != r || conn.LocalSize() != n {
					t.Errorf("rank %d: local rank %d of %d", r, conn.LocalRank(), conn.LocalSize())
				}
				g, err := allreduce.NewGroup(conn)
				if err != nil {
					return err
				}
				defer g.Close()
				buf := []float32{float32(r), 1, 2}
				if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
					return err
				}
				results[r] = buf
				// Rank 0 hosts the store: keep it until every rank is done.
				return allreduce.Barrier(ctx, g)
			}()
		}()
	}
	wg.Wait()
	for r := range errs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if want := []float32{0 + 1 + 2, 3, 6}; results[r][0] != want[0] || results[r][1] != want[1] || results[r][2] != want[2] {
			t.Errorf("rank %d: %v, want %v", r, results[r], want)
		}
	}
}
