package allreduce

import (
	"context"
	"slices"
)

// Ranges done. An AllReduce leaves some parts of its buffer final before
// others: the ring's reduce-scatter leaves this rank's chunk reduced (and,
// for Avg, divided) and its all-gather then fills in one chunk per step;
// halving-doubling's reduce-scatter leaves one block, and each step of its
// all-gather copies in the partner's half; the direct two-shot reduces
// this rank's chunk, then copies in the others' chunks one by one. A
// caller that has work to do on each part of the result (ddp's optimizer
// in backward) can start on a part as soon as it is final instead of
// waiting for the whole call: AllReduceRanges reports the parts as they
// become final.
//
// A part is final when the call writes none of it again: the values there
// are the call's result. The reduction order, and so the result, is that
// of AllReduce: reporting changes nothing on the wire nor in the
// arithmetic. The algorithms that report parts are the ring, halving-
// doubling and direct; every other algorithm (and the ranks of hd's fold
// that sit out) reports nothing while it runs, and its whole buffer is
// reported when the call returns.

// RangeDone is told that elements [lo, hi) of a collective's buffer are
// final. It runs on the goroutine that runs the collective, between its
// steps, so it should hand the range on rather than work on it at length;
// it may read the range (and the rest of the memory it owns) but must not
// write the buffer until the call has returned.
type RangeDone func(lo, hi int)

// AllReduceRanges is AllReduce that calls done for parts of buf as they
// become final, each element once, in no set order. When it returns nil,
// done has been called for every element of buf; after an error, done may
// have been called for some and buf is undefined, as after AllReduce. A
// nil done makes it AllReduce.
func AllReduceRanges[T Numeric](ctx context.Context, g *Group, buf []T, op ReduceOp, done RangeDone) error {
	c := call{kind: KindAllReduce, dt: DTypeOf[T](), op: op, root: -1, count: len(buf), buf: asBytes(buf)}
	return g.doRanges(ctx, &c, done)
}

// AllGatherVRanges is AllGatherV that calls done for parts of dst as they
// become final (this rank's own chunk first), as AllReduceRanges.
func AllGatherVRanges[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int, done RangeDone) error {
	layout, err := layoutOf(counts)
	if err != nil {
		g.Abort(err)
		return err
	}
	c := call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src), layout: layout}
	return g.doRanges(ctx, &c, done)
}

// doRanges runs c synchronously, reporting its final parts to done, and
// on success reports whatever the algorithm left unreported.
func (g *Group) doRanges(ctx context.Context, c *call, done RangeDone) error {
	if done == nil {
		return g.do(ctx, c)
	}
	f := &finals{done: done, es: c.dt.Size()}
	c.finals = f
	if err := g.do(ctx, c); err != nil {
		return err
	}
	f.rest(c.count)
	return nil
}

// finals tracks the parts of one call's buffer reported final.
type finals struct {
	done RangeDone
	es   int      // element size
	seen [][2]int // reported element ranges, in report order
}

// report says that bytes [lo, hi) of the call's buffer are final (nil f:
// nobody asked). Empty ranges are dropped.
func (f *finals) report(lo, hi int) {
	if f == nil || hi <= lo {
		return
	}
	a, b := lo/f.es, hi/f.es
	f.seen = append(f.seen, [2]int{a, b})
	f.done(a, b)
}

// rest reports every element of [0, n) not yet reported.
func (f *finals) rest(n int) {
	slices.SortFunc(f.seen, func(x, y [2]int) int { return x[0] - y[0] })
	at := 0
	for _, s := range f.seen {
		if s[0] > at {
			f.done(at, s[0])
		}
		at = max(at, s[1])
	}
	if at < n {
		f.done(at, n)
	}
	f.seen = f.seen[:0]
}
