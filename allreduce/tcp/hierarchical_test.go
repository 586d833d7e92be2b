package tcp_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// TestHierarchicalOverTCP runs the topology-aware algorithms over TCP ranks
// in one process, with tcp.Config.Node naming two simulated nodes (ranks
// 0..⌈N/2⌉-1 and the rest: uneven for odd N): the AllReduce cells of the
// reduced matrix (lengths {0, 1, N+1, 1000, 2^18+3} × {Sum, Max} ×
// {float32, int64}) against the sequential reference, for 2–5 ranks; then
// a program of collectives on special values, bitwise identical on every
// rank and run to run.
func TestHierarchicalOverTCP(t *testing.T) {
	algos := []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus, allreduce.Mesh}
	for n := 2; n <= 5; n++ {
		nodeOf := func(cfg *tcp.Config) { cfg.Node = fmt.Sprintf("node%d", cfg.Rank*2/n) }
		for _, algo := range algos {
			if testing.Short() && algo != allreduce.Hierarchical {
				continue
			}
			t.Run(fmt.Sprintf("%v/ranks=%d", algo, n), func(t *testing.T) {
				conns := tcpConnsWith(t, n, 20*time.Second, nodeOf)
				groups := make([]*allreduce.Group, n)
				for r, c := range conns {
					g, err := allreduce.NewGroup(c, allreduce.WithAlgorithm(algo))
					if err != nil {
						t.Fatal(err)
					}
					groups[r] = g
				}
				defer func() {
					for _, g := range groups {
						g.Close()
					}
				}()
				defer inputCache.Clear()
				defer refCache.Clear()
				for _, c := range cells(n) {
					if c.coll != allreduce.KindAllReduce {
						continue
					}
					var errs []error
					switch c.dtype {
					case "int64":
						errs = runCell[int64](groups, c)
					default:
						errs = runCell[float32](groups, c)
					}
					if err := allreducetest.FirstError(errs); err != nil {
						t.Fatalf("%v: %v", c, err)
					}
				}
				ctx, cancel := allreducetest.Ctx(20 * time.Second)
				defer cancel()
				topo, err := groups[0].Topology(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if topo.Nodes() != 2 {
					t.Fatalf("topology %v, want 2 nodes", topo)
				}
			})
		}
		t.Run(fmt.Sprintf("special/ranks=%d", n), func(t *testing.T) {
			prog := allreducetest.RandomProgram(uint64(n)*0x51ed, n, 30, 3000)
			for _, algo := range algos {
				var runs [2][]allreducetest.Outcome
				for i := range runs {
					var err error
					runs[i], err = allreducetest.RunProgram(asConns(tcpConnsWith(t, n, 20*time.Second, nodeOf)), prog, time.Minute, allreduce.WithAlgorithm(algo))
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
