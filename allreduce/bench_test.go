package allreduce_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// BenchmarkAllReduceInproc times AllReduce of float32 with the default
// algorithm (Direct) on in-process ranks: allreducetest.BenchAllReduce,
// the body every transport's benchmark shares.
func BenchmarkAllReduceInproc(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		for _, bytes := range []int{8, 4 << 10, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, bytesize.Format(bytes)), func(b *testing.B) {
				allreducetest.BenchAllReduce(b, allreducetest.Inproc(time.Minute)(b, n), bytes/4)
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
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, bytesize.Format(bytes)), func(b *testing.B) {
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
