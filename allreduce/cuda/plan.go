package cuda

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// The device ring, as data. A plan is what one rank enqueues on its stream
// for one collective; the device code (ring.go) turns it into
// kernel launches, copies and event waits, and the tests here (no GPU)
// run the same plan on host memory against package allreduce's ring and
// check it for races. It mirrors allreduce/ring.go step for step, with one
// difference of form: a rank does not send. Every rank's buffers are
// device memory in one CUDA context, so at step s rank r reads what its
// left neighbour would have sent straight out of the left neighbour's
// buffer (the fused "receive": a reduce kernel whose second operand is the
// peer's memory, or a device-to-device copy from it).
//
// Reduce-scatter, N-1 steps. At step s rank r reduces chunk c = r-s-2:
// out = local op received, local being its own value of chunk c and
// received the left neighbour's value of it (its input at s = 0, its
// partial result of step s-1 afterwards): the operand order of ring.go's
// sendRecvReduce(..., localFirst), so results are bitwise those of the
// host ring. All-gather, N-1 steps: at step s rank r copies chunk r-s-1
// from the left neighbour.
//
// Each step is cut into S segments (the same S on every rank): segment k
// of step g waits for segment k of step g-1 on both neighbours (events),
// so segment k+1's step g-1 still runs on a neighbour while this rank
// already reduces segment k of step g. The synchronisation is the same
// for every collective:
//
//	entry            recorded after everything the caller put on the stream before the call
//	(g, k)           waits for (g-1, k), or entry when g = 0, of both neighbours; runs; recorded
//	tail             waits for the right neighbour's last (g, k): it has read this rank's buffers
//
// so a rank reads a neighbour's buffer only after the neighbour wrote it
// and before the neighbour writes it again, and the collective is done on
// a rank's stream only when no peer reads its buffers any more. TestPlan*
// check exactly that on every plan (plan_test.go).

// bufID names one of a rank's buffers in a plan.
type bufID uint8

const (
	bufData     bufID = iota // AllReduce's buffer; ReduceScatter's and AllGather's destination
	bufSrc                   // ReduceScatter's and AllGather's source
	bufScratch0              // ReduceScatter's partial results, even steps
	bufScratch1              // odd steps
	numBufs
)

func (b bufID) String() string {
	return [...]string{"data", "src", "scratch0", "scratch1"}[b]
}

// span is n bytes at byte offset off of one of a rank's buffers.
type span struct {
	buf    bufID
	off, n int
}

func (s span) sub(off, n int) span { return span{s.buf, s.off + off, n} }

// actKind is what an action does.
type actKind uint8

const (
	actReduce    actKind = iota // out = a op b: a this rank's, b the left neighbour's
	actCopy                     // out = b (the left neighbour's)
	actLocalCopy                // out = a (this rank's own)
)

// action is one kernel or copy of a plan.
type action struct {
	kind actKind
	out  span // this rank's
	a    span // this rank's (actReduce, actLocalCopy)
	b    span // the left neighbour's (actReduce, actCopy)
	last bool // the last reduce step: Avg divides here
}

// plan is one rank's part of one collective.
type plan struct {
	kind     allreduce.Kind
	dt       allreduce.DType
	op       allreduce.ReduceOp
	ranks    int
	count    int
	entry    []action   // before the entry event (local only)
	steps    [][]action // steps[g][k]: segment k of step g, nil when it is empty
	segs     int        // S
	segElems int        // elements per segment (the last may be shorter)
	scratch  int        // bytes of scratch per scratch buffer
}

// call is the collective p is a part of.
func (p *plan) call() collective {
	return collective{kind: p.kind, dt: p.dt, op: p.op, count: p.count}
}

// records is how many events a rank records for the plan: entry, then
// one per segment of every step. A collective without steps (zero
// elements) still records its entry event on more than one rank: that is
// where the ranks exchange and compare their calls, so that a zero-length
// call facing a non-empty one is an error, not a hang.
func (p *plan) records() int { return 1 + len(p.steps)*p.segs }

// waitIndex is the event index (within the collective) of a neighbour that
// segment k of step g waits for.
func (p *plan) waitIndex(g, k int) int {
	if g == 0 {
		return 0
	}
	return 1 + (g-1)*p.segs + k
}

// recordIndex is the event index recorded after segment k of step g.
func (p *plan) recordIndex(g, k int) int { return 1 + g*p.segs + k }

// maxSegments bounds S; segBytes is the segment size aimed at.
const (
	maxSegments     = 8
	defaultSegBytes = 16 << 20
)

// segments is S for chunks of at most maxChunk bytes.
func segments(maxChunk, segBytes int) int {
	if segBytes <= 0 {
		segBytes = defaultSegBytes
	}
	s := (maxChunk + segBytes - 1) / segBytes
	return max(1, min(s, maxSegments))
}

// collective describes one call, as every rank must make it.
type collective struct {
	kind  allreduce.Kind
	dt    allreduce.DType
	op    allreduce.ReduceOp
	count int // elements of the whole collective (AllReduce's buffer, ReduceScatter's source, AllGather's destination)
}

func (c collective) String() string {
	switch c.kind {
	case allreduce.KindAllGather:
		return fmt.Sprintf("AllGather(count=%d, dtype=%v)", c.count, c.dt)
	case allreduce.KindReduceScatter:
		return fmt.Sprintf("ReduceScatter(count=%d, dtype=%v, op=%v)", c.count, c.dt, c.op)
	}
	return fmt.Sprintf("AllReduce(count=%d, dtype=%v, op=%v)", c.count, c.dt, c.op)
}

// mod is i mod n in [0, n).
func mod(i, n int) int { return ((i % n) + n) % n }

// chunk is the byte range of chunk i (mod n) of count elements of size es.
func chunk(count, n, i, es int) (lo, hi int) {
	l, h := allreduce.ChunkBounds(count, n, mod(i, n))
	return l * es, h * es
}

// makePlan is rank r's plan of c over n ranks. dstInSrc says that a
// ReduceScatter's destination is the source's own chunk, or an
// AllGather's source is the destination's own chunk (the in-place forms);
// segBytes is the segment size aimed at (0: the default).
func makePlan(c collective, n, r int, dstInSrc bool, segBytes int) (*plan, error) {
	if n < 1 || r < 0 || r >= n {
		return nil, fmt.Errorf("%w: rank %d of %d", allreduce.ErrInvalid, r, n)
	}
	if c.dt.Size() == 0 {
		return nil, fmt.Errorf("%w: dtype %v", allreduce.ErrInvalid, c.dt)
	}
	if c.kind != allreduce.KindAllGather {
		if _, err := kernelName(c.op, c.dt); err != nil {
			return nil, err
		}
	}
	es := c.dt.Size()
	p := &plan{kind: c.kind, dt: c.dt, op: c.op, ranks: n, count: c.count, segs: 1}
	maxChunk := 0
	for i := 0; i < n; i++ {
		lo, hi := chunk(c.count, n, i, es)
		maxChunk = max(maxChunk, hi-lo)
	}
	p.segs = segments(maxChunk, segBytes)
	maxElems := maxChunk / es
	p.segElems = max(1, (maxElems+p.segs-1)/p.segs)
	olo, ohi := chunk(c.count, n, r, es)
	own := ohi - olo
	whole := c.count * es
	switch c.kind {
	case allreduce.KindAllReduce:
		if c.count == 0 || n == 1 {
			return p, nil
		}
		for s := 0; s < n-1; s++ {
			lo, hi := chunk(c.count, n, r-s-2, es)
			d := span{bufData, lo, hi - lo}
			p.addStep(action{kind: actReduce, out: d, a: d, b: d, last: s == n-2})
		}
		for s := 0; s < n-1; s++ {
			lo, hi := chunk(c.count, n, r-s-1, es)
			d := span{bufData, lo, hi - lo}
			p.addStep(action{kind: actCopy, out: d, b: d})
		}
	case allreduce.KindReduceScatter:
		dst := span{bufData, 0, own}
		if dstInSrc {
			dst = span{bufSrc, olo, own}
		}
		if c.count == 0 {
			return p, nil
		}
		if n == 1 {
			if !dstInSrc {
				p.entry = append(p.entry, action{kind: actLocalCopy, out: dst, a: span{bufSrc, 0, whole}})
			}
			return p, nil
		}
		p.scratch = maxChunk
		for s := 0; s < n-1; s++ {
			lo, hi := chunk(c.count, n, r-s-2, es)
			local := span{bufSrc, lo, hi - lo}
			recv := local // the left neighbour's input at s = 0
			if s > 0 {
				recv = span{bufScratch0 + bufID((s-1)%2), 0, hi - lo}
			}
			out := dst
			if s < n-2 {
				out = span{bufScratch0 + bufID(s%2), 0, hi - lo}
			}
			p.addStep(action{kind: actReduce, out: out, a: local, b: recv, last: s == n-2})
		}
	case allreduce.KindAllGather:
		if c.count == 0 {
			return p, nil
		}
		if !dstInSrc {
			p.entry = append(p.entry, action{kind: actLocalCopy, out: span{bufData, olo, own}, a: span{bufSrc, 0, own}})
		}
		if n == 1 {
			return p, nil
		}
		for s := 0; s < n-1; s++ {
			lo, hi := chunk(c.count, n, r-s-1, es)
			d := span{bufData, lo, hi - lo}
			p.addStep(action{kind: actCopy, out: d, b: d})
		}
	default:
		return nil, fmt.Errorf("%w: collective kind %d on the device", allreduce.ErrInvalid, c.kind)
	}
	return p, nil
}

// addStep appends a step doing x, cut into p.segs segments on a grid of
// segElems elements that is the same for every step: segment k is elements
// [k·segElems, (k+1)·segElems) of the step's chunk, so that segment k of
// one step and segment k+1 of another never overlap, whatever the two
// chunks' lengths (they differ by one element at most). Segments past a
// short chunk's end are empty.
func (p *plan) addStep(x action) {
	es := p.dt.Size()
	segs := make([]action, p.segs)
	n := x.out.n / es
	for k := range segs {
		lo, hi := min(k*p.segElems, n), min((k+1)*p.segElems, n)
		if hi == lo {
			continue // an empty segment: nothing to launch, the event is still recorded
		}
		y := x
		off, m := lo*es, (hi-lo)*es
		y.out = x.out.sub(off, m)
		if x.kind != actCopy {
			y.a = x.a.sub(off, m)
		}
		if x.kind != actLocalCopy {
			y.b = x.b.sub(off, m)
		}
		segs[k] = y
	}
	p.steps = append(p.steps, segs)
}
