package allreduce

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Shift: a cyclic shift of one buffer per rank by d ranks. Rank r sends
// its buffer to rank (r+d) mod N and receives the buffer of rank
// (r−d) mod N: the permutation that carries every rank's piece to the rank
// d places to its right, as a ZeRO-1 buddy needs its left's piece of the
// reduced gradient (zero/buddy.go).
//
// Steps: one, every rank at once: send src (counts[r] elements) to r+d
// while receiving counts[r−d] elements from r−d into dst (one exchange,
// in pieces on transports with a segment size, pieces.go). Bytes: each
// rank sends counts[r] and receives counts[r−d] elements; no agreement
// message precedes the data (the message's header names the call, the
// counts' total and d, so a peer that issued another call, other counts
// or another offset fails with a mismatch instead of a misread buffer).
// With d = 0 every rank keeps its own buffer: src is copied into dst,
// nothing is sent. Where the transport lets one rank's buffers be read
// by another (in process) the exchange is still messages: one message
// per rank is what a shift costs anyway.

// Shift shifts every rank's src by d ranks: rank r's dst receives rank
// (r−d) mod N's src. counts[i] is rank i's len(src) (every rank passes
// the same counts and d); dst holds counts[(r−d) mod N] elements and
// must not overlap src (the send reads src while dst is written). d is
// in [0, N).
func Shift[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int, d int) error {
	c, err := shiftCall(g, dst, src, counts, d)
	if err != nil {
		g.Abort(err)
		return err
	}
	return g.do(ctx, &c)
}

// ShiftAsync starts Shift and returns at once. Bad counts fail the
// returned Work (and abort the group, as Shift does).
func ShiftAsync[T Numeric](ctx context.Context, g *Group, dst, src []T, counts []int, d int) *Work {
	c, err := shiftCall(g, dst, src, counts, d)
	if err != nil {
		g.Abort(err)
		w := newWork()
		w.finish(err)
		return w
	}
	return g.start(ctx, c)
}

// shiftCall is the call of a Shift. The offset travels as the header's
// root.
func shiftCall[T Numeric](g *Group, dst, src []T, counts []int, d int) (call, error) {
	layout, err := layoutOf(counts)
	if err != nil {
		return call{}, err
	}
	total := 0
	if len(layout) > 0 {
		total = layout[len(layout)-1].Hi
	}
	return call{kind: KindShift, dt: DTypeOf[T](), root: d, count: total, buf: asBytes(dst), src: asBytes(src), layout: layout}, nil
}

// shift runs call c (validated: d in range, one count per rank).
func (g *Group) shift(ctx context.Context, h transport.Header, c *call) error {
	n, r, d := g.size, g.rank, c.root
	es := c.dt.Size()
	left := mod(r-d, n)
	if err := g.checkLen(fmt.Sprintf("Shift's src on rank %d (its count)", r), len(c.src), c.layout[r].Len()*es); err != nil {
		return err
	}
	if err := g.checkLen(fmt.Sprintf("Shift's dst on rank %d (rank %d's count: it sends to this rank)", r, left), len(c.buf), c.layout[left].Len()*es); err != nil {
		return err
	}
	if overlapping(c.buf, c.src) {
		return fmt.Errorf("%w: Shift's dst and src on rank %d overlap (a shift cannot run in place: pass another buffer)", ErrInvalid, r)
	}
	if d == 0 {
		g.localCopy(c.buf, c.src)
		return nil
	}
	return g.sendRecvCopy(ctx, h, 0, mod(r+d, n), c.src, left, c.buf)
}

// overlapping reports whether a and b share memory.
func overlapping(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
