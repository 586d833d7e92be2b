package allreduce

import "context"

// AllReduce reduces buf element-wise over every rank with op and leaves the
// result, bitwise identical, in every rank's buf.
func AllReduce[T Numeric](ctx context.Context, g *Group, buf []T, op ReduceOp) error {
	c := call{kind: KindAllReduce, dt: DTypeOf[T](), op: op, root: -1, count: len(buf), buf: asBytes(buf)}
	return g.do(ctx, &c)
}

// AllReduceAsync starts AllReduce and returns at once.
func AllReduceAsync[T Numeric](ctx context.Context, g *Group, buf []T, op ReduceOp) *Work {
	return g.start(ctx, call{kind: KindAllReduce, dt: DTypeOf[T](), op: op, root: -1, count: len(buf), buf: asBytes(buf)})
}

// ReduceScatter reduces src element-wise over every rank with op and leaves
// chunk r of the result (ChunkBounds(len(src), N, r)) in rank r's dst. src
// is not modified; dst may be src's own chunk.
func ReduceScatter[T Numeric](ctx context.Context, g *Group, dst, src []T, op ReduceOp) error {
	c := call{kind: KindReduceScatter, dt: DTypeOf[T](), op: op, root: -1, count: len(src), buf: asBytes(dst), src: asBytes(src)}
	return g.do(ctx, &c)
}

// ReduceScatterAsync starts ReduceScatter and returns at once.
func ReduceScatterAsync[T Numeric](ctx context.Context, g *Group, dst, src []T, op ReduceOp) *Work {
	return g.start(ctx, call{kind: KindReduceScatter, dt: DTypeOf[T](), op: op, root: -1, count: len(src), buf: asBytes(dst), src: asBytes(src)})
}

// AllGather concatenates every rank's src into every rank's dst: rank r's
// src lands in chunk r of dst (ChunkBounds(len(dst), N, r)), so len(src) on
// rank r must be that chunk's length. src may be dst's own chunk.
func AllGather[T Numeric](ctx context.Context, g *Group, dst, src []T) error {
	c := call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src)}
	return g.do(ctx, &c)
}

// AllGatherAsync starts AllGather and returns at once.
func AllGatherAsync[T Numeric](ctx context.Context, g *Group, dst, src []T) *Work {
	return g.start(ctx, call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src)})
}

// Broadcast copies root's buf into every other rank's buf.
func Broadcast[T Numeric](ctx context.Context, g *Group, buf []T, root int) error {
	c := call{kind: KindBroadcast, dt: DTypeOf[T](), root: root, count: len(buf), buf: asBytes(buf)}
	return g.do(ctx, &c)
}

// BroadcastAsync starts Broadcast and returns at once.
func BroadcastAsync[T Numeric](ctx context.Context, g *Group, buf []T, root int) *Work {
	return g.start(ctx, call{kind: KindBroadcast, dt: DTypeOf[T](), root: root, count: len(buf), buf: asBytes(buf)})
}

// Reduce reduces buf element-wise over every rank with op into root's buf.
// Other ranks' buffers are left unchanged.
func Reduce[T Numeric](ctx context.Context, g *Group, buf []T, op ReduceOp, root int) error {
	c := call{kind: KindReduce, dt: DTypeOf[T](), op: op, root: root, count: len(buf), buf: asBytes(buf)}
	return g.do(ctx, &c)
}

// ReduceAsync starts Reduce and returns at once.
func ReduceAsync[T Numeric](ctx context.Context, g *Group, buf []T, op ReduceOp, root int) *Work {
	return g.start(ctx, call{kind: KindReduce, dt: DTypeOf[T](), op: op, root: root, count: len(buf), buf: asBytes(buf)})
}

// Barrier returns once every rank has entered it.
func Barrier(ctx context.Context, g *Group) error {
	c := call{kind: KindBarrier, root: -1}
	return g.do(ctx, &c)
}

// BarrierAsync starts Barrier and returns at once.
func BarrierAsync(ctx context.Context, g *Group) *Work {
	return g.start(ctx, call{kind: KindBarrier, root: -1})
}

// ReduceScatterV is ReduceScatter with chunk r of counts[r] elements (the
// chunks in rank order tile src). Every rank must pass the same counts.
func ReduceScatterV[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int, op ReduceOp) error {
	layout, err := layoutOf(counts)
	if err != nil {
		g.Abort(err)
		return err
	}
	c := call{kind: KindReduceScatter, dt: DTypeOf[T](), op: op, root: -1, count: len(src), buf: asBytes(dst), src: asBytes(src), layout: layout}
	return g.do(ctx, &c)
}

// AllGatherV is AllGather with rank r contributing counts[r] elements (the
// chunks in rank order tile dst). Every rank must pass the same counts.
func AllGatherV[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int) error {
	layout, err := layoutOf(counts)
	if err != nil {
		g.Abort(err)
		return err
	}
	c := call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src), layout: layout}
	return g.do(ctx, &c)
}

// AllGatherVAsync starts AllGatherV and returns at once. Bad counts fail
// the returned Work (and abort the group, as AllGatherV does).
func AllGatherVAsync[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int) *Work {
	layout, err := layoutOf(counts)
	if err != nil {
		g.Abort(err)
		w := newWork()
		w.finish(err)
		return w
	}
	return g.start(ctx, call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src), layout: layout})
}
