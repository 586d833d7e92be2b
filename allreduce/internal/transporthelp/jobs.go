package transporthelp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Join makes this process's endpoint of the job its environment
// describes, and returns it with the job's store (JoinFromEnv with a
// transport's dial).
type Join[C transport.Conn] func(ctx context.Context) (C, *rendezvous.TCPStore, error)

// MatrixRank is one rank of the multi-process matrix: every algorithm the
// endpoint's transport can run, AllReduce of awkward lengths
// (allreducetest.CrossProcessLengths) with every op on float32 and int64,
// compared bit for bit with the sequential reference, a Barrier after
// each. It prints "<who(conn)>: <count> algorithms ok: <algorithms>".
func MatrixRank[C transport.Conn](join Join[C], who func(C) string) error {
	ctx := context.Background()
	conn, store, err := join(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	algos, err := allreducetest.RankMatrix(ctx, conn, allreducetest.CrossProcessLengths(conn.Size()),
		func(g *allreduce.Group) error { return allreduce.Barrier(ctx, g) })
	if err != nil {
		return err
	}
	_ = conn.Close()
	fmt.Printf("%s: %d algorithms ok: %v\n", who(conn), len(algos), algos)
	return nil
}

// LoopRank is a rank of the job a kill test kills (allreducetest.LoopRing).
func LoopRank[C transport.Conn](join Join[C]) error {
	ctx := context.Background()
	conn, store, err := join(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return allreducetest.LoopRing(ctx, conn)
}

// CheckRanks fails t with every rank's error and output, and logs rank
// 0's output; what names the job ("3 processes").
func CheckRanks(t *testing.T, what string, outs []*SyncBuf, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("%s, rank %d: %v\n%s", what, r, err, outs[r])
		}
	}
	t.Logf("%s: %s", what, strings.TrimSpace(outs[0].String()))
}

// MultiProcess skips t in -short mode: its ranks are processes.
func MultiProcess(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process")
	}
}

// Trials is how many trials to run: n, or soak under allreducetest.Soak.
func Trials(n, soak int) int {
	if allreducetest.Soak() {
		return soak
	}
	return n
}
