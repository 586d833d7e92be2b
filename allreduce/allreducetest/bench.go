package allreducetest

import (
	"context"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
)

// BenchAllReduce is the AllReduce benchmark body of every transport: it
// times b.N AllReduce(Sum) calls of count float32 on the ranks of conns
// (groups made with opts; RunRanks runs them and closes them), each rank
// on its own goroutine, after one untimed warm-up call. Rank 0's calls are
// the timed ones; it reports bytes per call (SetBytes), allocations and
// busbw_GB/s = algbw·2(N-1)/N, the rate each link of a ring carries
// (nccl-tests' convention, comparable with a raw link's rate).
func BenchAllReduce(b *testing.B, conns []transport.Conn, count int, opts ...allreduce.GroupOption) {
	b.Helper()
	n := len(conns)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = reference.Input[float32](1, r, count, allreduce.Sum)
	}
	bytes := count * 4
	iters := b.N
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	errs := RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		r := g.Rank()
		if err := allreduce.AllReduce(ctx, g, bufs[r], allreduce.Sum); err != nil { // warm-up
			return err
		}
		if r == 0 {
			// The benchmark's goroutine waits in RunRanks meanwhile.
			b.ResetTimer()
			defer b.StopTimer()
		}
		for range iters {
			if err := allreduce.AllReduce(ctx, g, bufs[r], allreduce.Sum); err != nil {
				return err
			}
		}
		return nil
	}, opts...)
	if err := FirstError(errs); err != nil {
		b.Fatal(err)
	}
	if sec := b.Elapsed().Seconds() / float64(iters); sec > 0 && n > 1 {
		b.ReportMetric(float64(bytes)*2*float64(n-1)/float64(n)/sec/1e9, "busbw_GB/s")
	}
}
