package tcp_test

import (
	"context"
	"log"
	"os"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// A process of a multi-process job, as launched by torchrun, mpirun, srun
// or a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// RINGDDP_SECRET.
func Example() {
	env, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Rank 0 hosts the store at MASTER_ADDR:MASTER_PORT; it must stay open
	// at least until Dial has returned on rank 0.
	store, err := rendezvous.Connect(ctx, env, "", rendezvous.StoreConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	cfg := tcp.ConfigFromEnv(env, store)
	cfg.RunID = "my-job"
	conn, err := tcp.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	g, err := allreduce.NewGroup(conn) // the group owns conn
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	grad := make([]float32, 1<<20)
	if err := allreduce.AllReduce(ctx, g, grad, allreduce.Avg); err != nil {
		log.Fatal(err)
	}
}
