package tcp_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// twoNodes names two simulated nodes in tcp.Config.Node: ranks
// 0..⌈N/2⌉-1 and the rest (uneven for odd N).
func twoNodes(cfg *tcp.Config) { cfg.Node = fmt.Sprintf("node%d", cfg.Rank*2/cfg.Size) }

// tcpTwoNodes is a MatrixConfig.Connect: n ranks over loopback on
// twoNodes.
func tcpTwoNodes(tb testing.TB, n int) []transport.Conn {
	return allreducetest.Conns(tcpConnsWith(tb, n, 20*time.Second, twoNodes))
}

// TestHierarchicalOverTCP runs the topology-aware algorithms over TCP ranks
// in one process on the two nodes of twoNodes, for 2–5 ranks: the
// AllReduce matrix reduced as TestCollectivesOverTCP's (lengths {0, 1,
// N-1, N, N+1, 1000} and, with every op and dtype, 2^18+3; {Sum, Max} ×
// {float32, int64}; synchronously: TestCollectivesOverTCP runs the other
// modes, on one node) against the sequential reference; every rank's
// topology of 2 nodes; then a program of collectives on special values,
// bitwise identical on every rank and run to run.
func TestHierarchicalOverTCP(t *testing.T) {
	algos := []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}
	matrixAlgos := algos
	if testing.Short() {
		matrixAlgos = algos[:1]
	}
	ops := []allreduce.ReduceOp{allreduce.Sum, allreduce.Max}
	dtypes := []allreduce.DType{allreduce.Float32, allreduce.Int64}
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect:     tcpTwoNodes,
		Collectives: []allreduce.Kind{allreduce.KindAllReduce},
		Algorithms:  matrixAlgos,
		Ranks:       []int{2, 3, 4, 5},
		Ops:         ops,
		DTypes:      dtypes,
		Huge: func(allreduce.Kind, allreduce.Algorithm, int) ([]allreduce.ReduceOp, []allreduce.DType) {
			return ops, dtypes
		},
		HugeLen:  tcpHugeLen,
		SyncOnly: true,
	})
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprintf("topology/ranks=%d", n), func(t *testing.T) {
			errs := allreducetest.RunRanks(tcpTwoNodes(t, n), func(g *allreduce.Group) error {
				ctx, cancel := allreducetest.Ctx(20 * time.Second)
				defer cancel()
				topo, err := g.Topology(ctx)
				if err != nil {
					return err
				}
				if want := fmt.Sprintf("2 nodes: %d,%d", (n+1)/2, n/2); topo.String() != want {
					return fmt.Errorf("topology %v, want %s", topo, want)
				}
				return nil
			})
			allreducetest.RequireNoErrors(t, errs)
		})
		t.Run(fmt.Sprintf("special/ranks=%d", n), func(t *testing.T) {
			prog := allreducetest.RandomProgram(uint64(n)*0x51ed, n, 30, 3000)
			for _, algo := range algos {
				var runs [2][]allreducetest.Outcome
				for i := range runs {
					var err error
					runs[i], err = allreducetest.RunProgram(tcpTwoNodes(t, n), prog, time.Minute, allreduce.WithAlgorithm(algo))
					if err != nil {
						t.Fatalf("%v: %v", algo, err)
					}
				}
				if err := allreducetest.CheckProgram(prog, runs[0]); err != nil {
					t.Fatalf("%v: %v", algo, err)
				}
				if err := allreducetest.SameOutcomes(runs[0], runs[1]); err != nil {
					t.Fatalf("%v: %v", algo, err)
				}
			}
		})
	}
}
