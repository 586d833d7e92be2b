package cuda

import (
	"context"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

func conns(w *inproc.World) []transport.Conn {
	var out []transport.Conn
	for _, c := range w.Conns() {
		out = append(out, c)
	}
	return out
}

func elems[T allreduce.Numeric](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// The host collectives on raw bytes of c.dt.

func allreduceBytes(ctx context.Context, g *allreduce.Group, c collective, buf []byte) error {
	switch c.dt {
	case allreduce.Float32:
		return allreduce.AllReduce(ctx, g, elems[float32](buf), c.op)
	case allreduce.Float64:
		return allreduce.AllReduce(ctx, g, elems[float64](buf), c.op)
	case allreduce.Int32:
		return allreduce.AllReduce(ctx, g, elems[int32](buf), c.op)
	}
	return allreduce.AllReduce(ctx, g, elems[int64](buf), c.op)
}

func reduceScatterBytes(ctx context.Context, g *allreduce.Group, c collective, dst, src []byte) error {
	switch c.dt {
	case allreduce.Float32:
		return allreduce.ReduceScatter(ctx, g, elems[float32](dst), elems[float32](src), c.op)
	case allreduce.Float64:
		return allreduce.ReduceScatter(ctx, g, elems[float64](dst), elems[float64](src), c.op)
	case allreduce.Int32:
		return allreduce.ReduceScatter(ctx, g, elems[int32](dst), elems[int32](src), c.op)
	}
	return allreduce.ReduceScatter(ctx, g, elems[int64](dst), elems[int64](src), c.op)
}

func allGatherBytes(ctx context.Context, g *allreduce.Group, c collective, dst, src []byte) error {
	switch c.dt {
	case allreduce.Float32:
		return allreduce.AllGather(ctx, g, elems[float32](dst), elems[float32](src))
	case allreduce.Float64:
		return allreduce.AllGather(ctx, g, elems[float64](dst), elems[float64](src))
	case allreduce.Int32:
		return allreduce.AllGather(ctx, g, elems[int32](dst), elems[int32](src))
	}
	return allreduce.AllGather(ctx, g, elems[int64](dst), elems[int64](src))
}

func asBytes[T allreduce.Numeric](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
