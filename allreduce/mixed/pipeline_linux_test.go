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
// blocks of 4 MiB or more (allreduce/pipeline.go): on 2 hosts × 2 ranks
// and on 1 + 2 ranks per host (the lone rank runs its blocks one after
// the other), at an odd length of two float32 blocks, Sum and Avg (a
// division per block), against the sequential reference on every rank.
// Under the race detector, 2 × 2 and Sum only (8 MiB a rank; what it is
// there for is the two goroutines). Not in short mode.
func TestPipelinedTopologyAlgorithms(t *testing.T) {
	if testing.Short() {
		t.Skip("8 MiB a rank; not in short mode")
	}
	layouts, ops := []layout{blocks, lonely}, []allreduce.ReduceOp{allreduce.Sum, allreduce.Avg}
	if raceEnabled {
		layouts, ops = layouts[:1], ops[:1]
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			ranks := 4
			if l.name == lonely.name {
				ranks = 3
			}
			allreducetest.Matrix(t, allreducetest.MatrixConfig{
				Connect: func(tb testing.TB, n int) []transport.Conn {
					return allreducetest.Conns(dialLayoutTimeout(tb, l, n, 30*time.Second))
				},
				Collectives: []allreduce.Kind{allreduce.KindAllReduce},
				Algorithms:  []allreduce.Algorithm{allreduce.Hierarchical, allreduce.Torus},
				Ranks:       []int{ranks},
				Lengths:     func(int) []int { return []int{2<<20 + 3} },
				Ops:         ops,
				DTypes:      []allreduce.DType{allreduce.Float32},
				SyncOnly:    true,
				Timeout:     2 * time.Minute,
			})
		})
	}
}
