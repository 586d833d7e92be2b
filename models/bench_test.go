package models

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"
)

// One forward+backward step (RunAll after Reset) at batch 64.
func BenchmarkStep(b *testing.B) {
	const batch = 64
	for _, tc := range []struct {
		name string
		ctor modelCtor
	}{{"mlp", mlpCtor()}, {"lenet", lenetCtor}} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			b.Run(fmt.Sprintf("model=%s/dtype=%v/batch=%d", tc.name, dt, batch), func(b *testing.B) {
				r := buildRig(b, tc.ctor, dt, 1, batch, 784, 10, false)
				x, y, _ := randInputs(dt, 1, batch, 784, 10)
				r.bind(b, x, y)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					r.vm.Reset()
					require.NoError(b, r.vm.RunAll())
				}
			})
		}
	}
}
