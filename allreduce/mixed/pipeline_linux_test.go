//go:build linux

package mixed_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Over a mixed transport, Hierarchical and Torus pipeline their
// intra-host and inter-host stages on the two endpoints at once, in
// blocks of 4 MiB or more (allreduce/pipeline.go): 2 hosts × 2 ranks, 2 +
// 1 and 1 + 3 ranks per host, at an odd length of 2 float32 blocks and 4
// int64 ones, against the sequential reference on every rank. Not in
// short mode (8 to 16 MiB a rank).
func TestPipelinedTopologyAlgorithms(t *testing.T) {
	if testing.Short() {
		t.Skip("8 to 16 MiB a rank; not in short mode")
	}
	for _, l := range []layout{blocks, lonely} {
		t.Run(l.name, func(t *testing.T) {
			allreducetest.Matrix(t, allreducetest.MatrixConfig{
				Connect: func(tb testing.TB, n int) []transport.Conn {
					return allreducetest.Conns(dialLayoutTimeout(tb, l, n, 30*time.Second))
				},
				Collectives: []allreduce.Kind{allreduce.KindAllReduce},
				Algorithms:  []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus},
				Ranks:       []int{3, 4},
				Lengths:     func(int) []int { return []int{2<<20 + 3} },
				Ops:         []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg, allreduce.Max},
				DTypes:      []allreduce.DType{allreduce.Float32, allreduce.Int64},
				SyncOnly:    true,
				Timeout:     2 * time.Minute,
			})
		})
	}
}
