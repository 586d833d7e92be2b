package allreduce_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// benchAllReduce times b.N in-process AllReduce calls of count float32 on n
// ranks. Ranks 1..n-1 run on their own goroutines; rank 0 is the timed one.
func benchAllReduce(b *testing.B, n, count int) {
	conns, _, err := allreducetest.InprocConns(n, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	groups := make([]*allreduce.Group, n)
	bufs := make([][]float32, n)
	for r := range groups {
		if groups[r], err = allreduce.NewGroup(conns[r]); err != nil {
			b.Fatal(err)
		}
		bufs[r] = allreducetest.Input[float32](1, r, count, allreduce.Sum)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	ctx := context.Background()
	iters := b.N
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i <= iters; i++ {
				if err := allreduce.AllReduce(ctx, groups[r], bufs[r], allreduce.Sum); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	// One untimed warm-up call.
	if err := allreduce.AllReduce(ctx, groups[0], bufs[0], allreduce.Sum); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(count * 4))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < iters; i++ {
		if err := allreduce.AllReduce(ctx, groups[0], bufs[0], allreduce.Sum); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wg.Wait()
	if err := allreducetest.FirstError(errs); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkAllReduceInproc(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		for _, bytes := range []int{8, 4 << 10, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, allreducetest.FormatBytes(bytes)), func(b *testing.B) {
				benchAllReduce(b, n, bytes/4)
			})
		}
	}
}

// BenchmarkMemcpyBaseline copies ranks×bytes once per iteration: the least
// memory traffic an in-process all-reduce of that size must cause (every
// rank's result buffer must be written once).
func BenchmarkMemcpyBaseline(b *testing.B) {
	for _, n := range []int{4} {
		for _, bytes := range []int{64 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, allreducetest.FormatBytes(bytes)), func(b *testing.B) {
				src := make([]byte, n*bytes)
				dst := make([]byte, n*bytes)
				for i := range src {
					src[i] = byte(i)
				}
				b.SetBytes(int64(bytes))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					copy(dst, src)
				}
			})
		}
	}
}
