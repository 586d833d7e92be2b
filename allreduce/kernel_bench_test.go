package allreduce

import "testing"

func BenchmarkCombineSumFloat32(b *testing.B) {
	n := 4 << 20
	out, a, c := make([]float32, n), make([]float32, n), make([]float32, n)
	b.SetBytes(int64(n * 4))
	for i := 0; i < b.N; i++ {
		combineElems(Sum, out, a, c)
	}
}

func BenchmarkCopy16MiB(b *testing.B) {
	n := 16 << 20
	dst, src := make([]byte, n), make([]byte, n)
	b.SetBytes(int64(n))
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}
