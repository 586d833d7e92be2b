package ddp

import (
	"context"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// mlpShapes are the default MLP's parameters (784-256-128-10), as one
// bucket: the hooks' compute per step on the model the bed measures.
var mlpShapes = [][]int{{10}, {10, 128}, {128}, {128, 256}, {256}, {256, 784}}

// benchHook times one hook's Reduce of the MLP's gradient on a group of
// one rank: its compute (compress, decompress, orthogonalise, GEMMs),
// with the collectives as cheap as they get.
func benchHook(b *testing.B, newHook func() (CommHook[float32], error)) {
	total := elems(mlpShapes)
	errs := allreducetest.RunInproc(1, time.Minute, func(g *allreduce.Group) error {
		h, err := newHook()
		if err != nil {
			return err
		}
		buf := make([]float32, total)
		bk, err := NewGradBucket(g, 0, true, buf, mlpShapes)
		if err != nil {
			return err
		}
		grads := randGrads(0, 0, total)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			for i, v := range grads {
				buf[i] = float32(v)
			}
			if err := h.Reduce(ctx, bk); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHookMLP(b *testing.B) {
	b.Run("powersgd4", func(b *testing.B) {
		benchHook(b, func() (CommHook[float32], error) {
			return NewPowerSGD[float32](PowerSGDConfig{Rank: 4, MinCompressionRate: 2, ErrorFeedback: true, WarmStart: true})
		})
	})
	b.Run("bf16", func(b *testing.B) {
		benchHook(b, func() (CommHook[float32], error) { return NewCompression[float32](BF16, true) })
	})
	b.Run("fp16", func(b *testing.B) {
		benchHook(b, func() (CommHook[float32], error) { return NewCompression[float32](FP16, true) })
	})
	b.Run("none", func(b *testing.B) {
		benchHook(b, func() (CommHook[float32], error) {
			return CommHookFunc[float32](func(ctx context.Context, bk *GradBucket[float32]) error {
				return allreduce.AllReduce(ctx, bk.Group(), bk.Buffer(), allreduce.Avg)
			}), nil
		})
	})
}

// elems is the number of elements of tensors of the given shapes.
func elems(shapes [][]int) int {
	total := 0
	for _, s := range shapes {
		n := 1
		for _, d := range s {
			n *= d
		}
		total += n
	}
	return total
}
