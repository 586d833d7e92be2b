//go:build cuda

package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/cu"
)

// World is n ranks on one device, to be driven by n goroutines: rank r's
// collectives go through Comm(r). Every rank must make the same calls in
// the same order (like a host Group); a rank whose call differs from a
// neighbour's gets an error naming both, and the World is poisoned: every
// later call fails with the first error.
type World struct {
	dev      *Device
	n        int
	segBytes int
	comms    []*Comm

	mu       sync.Mutex
	cond     *sync.Cond
	progress []int64         // per rank: events recorded (host side)
	posted   [][4]postedCall // per rank, by sequence number mod 4
	err      error
}

// postedCall is what a rank tells its neighbours about a collective: the
// call, to be checked against theirs, and its buffers' addresses, which
// their kernels read.
type postedCall struct {
	seq  uint64
	call collective
	ptrs [numBufs]uintptr
}

// Option configures a World.
type Option func(*World)

// WithSegmentBytes sets the size a ring step's segments aim at (default
// 16 MiB; at most 8 segments a step). Tests shrink it so that small
// buffers run the segmented paths.
func WithSegmentBytes(n int) Option { return func(w *World) { w.segBytes = n } }

// eventRing is how many events a rank keeps; its event t reuses slot
// t mod eventRing once both neighbours have passed the waits on t - eventRing.
const eventRing = 4*maxSegments + 16

// NewWorld makes n ranks on dev, each with its own non-blocking stream.
func NewWorld(dev *Device, n int, opts ...Option) (*World, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a world of %d ranks", allreduce.ErrInvalid, n)
	}
	w := &World{dev: dev, n: n, progress: make([]int64, n), posted: make([][4]postedCall, n)}
	w.cond = sync.NewCond(&w.mu)
	for _, o := range opts {
		o(w)
	}
	for r := 0; r < n; r++ {
		c := &Comm{w: w, rank: r}
		w.comms = append(w.comms, c)
		err := dev.do(func() error {
			var err error
			if c.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
				return fmt.Errorf("cuda: stream of rank %d: %w", r, err)
			}
			c.events = make([]cu.Event, eventRing)
			for i := range c.events {
				if c.events[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
					return fmt.Errorf("cuda: event of rank %d: %w", r, err)
				}
			}
			return nil
		})
		if err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	return w, nil
}

// Comm is rank r's endpoint.
func (w *World) Comm(r int) *Comm { return w.comms[r] }

// Size is the number of ranks; Device the GPU.
func (w *World) Size() int       { return w.n }
func (w *World) Device() *Device { return w.dev }

// Close waits for every rank's stream and releases streams, events and
// scratch memory.
func (w *World) Close() error {
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	for _, c := range w.comms {
		c := c
		keep(w.dev.do(func() error {
			if c.stream != (cu.Stream{}) {
				keep(c.stream.Synchronize())
				keep(c.stream.Destroy())
			}
			for i := range c.events {
				if c.events[i] != (cu.Event{}) {
					keep(cu.DestroyEvent(&c.events[i]))
				}
			}
			return nil
		}))
		if c.scratch != nil {
			keep(c.scratch.Free())
		}
	}
	w.comms = nil
	return first
}

// fail poisons the world with err (the first error stays) and wakes every
// host wait.
func (w *World) fail(err error) error {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	err = w.err
	w.cond.Broadcast()
	w.mu.Unlock()
	return err
}

// waitFor returns once rank r has recorded at least n events.
func (w *World) waitFor(ctx context.Context, r int, n int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.progress[r] < n {
		if w.err != nil {
			return w.err
		}
		if err := ctx.Err(); err != nil {
			w.mu.Unlock()
			err = w.fail(fmt.Errorf("cuda: rank waiting for rank %d: %w", r, err))
			w.mu.Lock()
			return err
		}
		w.cond.Wait()
	}
	return w.err
}

// Comm is one rank of a World: its stream, its events and its place in
// the sequence of collectives. A Comm is used by one goroutine at a time.
type Comm struct {
	w       *World
	rank    int
	stream  cu.Stream
	events  []cu.Event
	recs    int64  // events recorded so far (the same count on every rank)
	seq     uint64 // collectives enqueued so far
	scratch *Buffer
}

// Rank is this rank; Size the world's; Stream the stream its collectives
// run on. A collective runs after everything enqueued on Stream before the
// call: put the work that produces the buffer there (or make Stream wait
// for it), and read the result after Synchronize or from work enqueued on
// Stream after the call.
func (c *Comm) Rank() int         { return c.rank }
func (c *Comm) Size() int         { return c.w.n }
func (c *Comm) Stream() cu.Stream { return c.stream }
func (c *Comm) Device() *Device   { return c.w.dev }

// Synchronize waits until everything enqueued on the stream is done:
// spinning for the first 50 µs (small collectives), then sleeping a little
// longer each time, up to 1 ms, until ctx is done.
func (c *Comm) Synchronize(ctx context.Context) error {
	start := time.Now()
	sleep := 5 * time.Microsecond
	for {
		var err error
		_ = c.w.dev.do(func() error { err = c.stream.Query(); return nil })
		if err == nil {
			return nil
		}
		if !errors.Is(err, cu.NotReady) {
			return c.w.fail(fmt.Errorf("cuda: rank %d's stream: %w", c.rank, err))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(start) < 50*time.Microsecond {
			runtime.Gosched()
			continue
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, time.Millisecond)
	}
}

// AllReduce reduces buf over every rank with op and leaves the result,
// bitwise identical, in every rank's buf; it returns when the result is
// there.
func (c *Comm) AllReduce(ctx context.Context, buf Slice, op allreduce.ReduceOp) error {
	if err := c.AllReduceAsync(ctx, buf, op); err != nil {
		return err
	}
	return c.Synchronize(ctx)
}

// AllReduceAsync enqueues AllReduce on the stream and returns once it is
// enqueued (which waits for the neighbours to enqueue their part of the
// steps this rank's steps depend on: call it on every rank concurrently).
func (c *Comm) AllReduceAsync(ctx context.Context, buf Slice, op allreduce.ReduceOp) error {
	var ptrs [numBufs]uintptr
	ptrs[bufData] = buf.Ptr
	return c.enqueue(ctx, collective{kind: allreduce.KindAllReduce, dt: buf.DType, op: op, count: buf.Len}, ptrs, false)
}

// ReduceScatter reduces src over every rank with op and leaves chunk r of
// the result (allreduce.ChunkBounds(src.Len, N, r)) in rank r's dst. src
// is not modified; dst may be src's own chunk.
func (c *Comm) ReduceScatter(ctx context.Context, dst, src Slice, op allreduce.ReduceOp) error {
	if err := c.ReduceScatterAsync(ctx, dst, src, op); err != nil {
		return err
	}
	return c.Synchronize(ctx)
}

// ReduceScatterAsync enqueues ReduceScatter.
func (c *Comm) ReduceScatterAsync(ctx context.Context, dst, src Slice, op allreduce.ReduceOp) error {
	lo, hi := allreduce.ChunkBounds(src.Len, c.w.n, c.rank)
	if dst.DType != src.DType || dst.Len != hi-lo {
		return fmt.Errorf("%w: ReduceScatter destination %v for source %v: want %d×%v (rank %d's chunk)", allreduce.ErrInvalid, dst, src, hi-lo, src.DType, c.rank)
	}
	inSrc := dst.Len == 0 || dst.Ptr == src.Ptr+uintptr(lo*src.DType.Size())
	if !inSrc && overlaps(dst, src) {
		return fmt.Errorf("%w: ReduceScatter destination %v overlaps source %v other than as its own chunk", allreduce.ErrInvalid, dst, src)
	}
	var ptrs [numBufs]uintptr
	ptrs[bufData], ptrs[bufSrc] = dst.Ptr, src.Ptr
	return c.enqueue(ctx, collective{kind: allreduce.KindReduceScatter, dt: src.DType, op: op, count: src.Len}, ptrs, inSrc)
}

// AllGather concatenates every rank's src into every rank's dst: rank r's
// src lands in chunk r of dst (allreduce.ChunkBounds(dst.Len, N, r)). src
// may be dst's own chunk.
func (c *Comm) AllGather(ctx context.Context, dst, src Slice) error {
	if err := c.AllGatherAsync(ctx, dst, src); err != nil {
		return err
	}
	return c.Synchronize(ctx)
}

// AllGatherAsync enqueues AllGather.
func (c *Comm) AllGatherAsync(ctx context.Context, dst, src Slice) error {
	lo, hi := allreduce.ChunkBounds(dst.Len, c.w.n, c.rank)
	if dst.DType != src.DType || src.Len != hi-lo {
		return fmt.Errorf("%w: AllGather source %v for destination %v: want %d×%v (rank %d's chunk)", allreduce.ErrInvalid, src, dst, hi-lo, dst.DType, c.rank)
	}
	inDst := src.Len == 0 || src.Ptr == dst.Ptr+uintptr(lo*dst.DType.Size())
	if !inDst && overlaps(dst, src) {
		return fmt.Errorf("%w: AllGather source %v overlaps destination %v other than as its own chunk", allreduce.ErrInvalid, src, dst)
	}
	var ptrs [numBufs]uintptr
	ptrs[bufData], ptrs[bufSrc] = dst.Ptr, src.Ptr
	return c.enqueue(ctx, collective{kind: allreduce.KindAllGather, dt: dst.DType, op: 0, count: dst.Len}, ptrs, inDst)
}

// enqueue puts this rank's plan of call x on its stream.
func (c *Comm) enqueue(ctx context.Context, x collective, ptrs [numBufs]uintptr, dstInSrc bool) error {
	w := c.w
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if x.count < 0 {
		return fmt.Errorf("%w: %v", allreduce.ErrInvalid, x)
	}
	p, err := makePlan(x, w.n, c.rank, dstInSrc, w.segBytes)
	if err != nil {
		return err
	}
	if p.scratch > 0 {
		if err := c.ensureScratch(ctx, 2*p.scratch); err != nil {
			return err
		}
		ptrs[bufScratch0] = c.scratch.Uintptr()
		ptrs[bufScratch1] = c.scratch.Uintptr() + uintptr(p.scratch)
	}
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	seq := c.seq
	c.seq++
	w.mu.Lock()
	w.posted[c.rank][seq%4] = postedCall{seq: seq, call: x, ptrs: ptrs}
	w.mu.Unlock()
	err = w.dev.do(func() error { return c.run(ctx, p, seq, ptrs) })
	if err != nil {
		return w.fail(err)
	}
	return nil
}

// run enqueues p: entry actions, the entry event, every segment of every
// step after its waits, and the tail.
func (c *Comm) run(ctx context.Context, p *plan, seq uint64, mine [numBufs]uintptr) error {
	w := c.w
	for _, x := range p.entry {
		if err := c.do(p, x, mine, mine); err != nil {
			return err
		}
	}
	if p.records() == 0 {
		return nil
	}
	n := w.n
	left, right := mod(c.rank-1, n), mod(c.rank+1, n)
	base := c.recs
	if err := c.record(ctx, base, p.segs, left, right); err != nil {
		return err
	}
	// The neighbours' calls and buffers, once they have posted them
	// (before their entry event).
	var theirs [numBufs]uintptr
	for _, nb := range []int{left, right} {
		if err := w.waitFor(ctx, nb, base+1); err != nil {
			return err
		}
		w.mu.Lock()
		pc := w.posted[nb][seq%4]
		w.mu.Unlock()
		if pc.seq != seq || pc.call != p.call() {
			return fmt.Errorf("cuda: mismatched collectives: rank %d called %v, rank %d called %v (call %d)", c.rank, p.call(), nb, pc.call, seq)
		}
		if nb == left {
			theirs = pc.ptrs
		}
	}
	for g := range p.steps {
		for k := 0; k < p.segs; k++ {
			wi := base + int64(p.waitIndex(g, k))
			for _, nb := range neighbours(left, right) {
				if err := w.waitFor(ctx, nb, wi+1); err != nil {
					return err
				}
				if err := c.stream.Wait(w.comms[nb].events[wi%eventRing], 0); err != nil {
					return fmt.Errorf("cuda: cuStreamWaitEvent: %w", err)
				}
			}
			if x := p.steps[g][k]; x.out.n > 0 {
				if err := c.do(p, x, mine, theirs); err != nil {
					return err
				}
			}
			if err := c.record(ctx, base+int64(p.recordIndex(g, k)), p.segs, left, right); err != nil {
				return err
			}
		}
	}
	// The tail: the right neighbour has read this rank's buffers.
	last := base + int64(p.records()) - 1
	if err := w.waitFor(ctx, right, last+1); err != nil {
		return err
	}
	if err := c.stream.Wait(w.comms[right].events[last%eventRing], 0); err != nil {
		return fmt.Errorf("cuda: cuStreamWaitEvent: %w", err)
	}
	return nil
}

func neighbours(left, right int) []int {
	if left == right {
		return []int{left}
	}
	return []int{left, right}
}

// record records event t on the stream, once the neighbours can no longer
// wait for the event that used its slot before, and publishes it.
func (c *Comm) record(ctx context.Context, t int64, segs, left, right int) error {
	w := c.w
	if need := t - eventRing + int64(segs) + 1; need > 0 {
		for _, nb := range neighbours(left, right) {
			if err := w.waitFor(ctx, nb, need); err != nil {
				return err
			}
		}
	}
	if err := c.events[t%eventRing].Record(c.stream); err != nil {
		return fmt.Errorf("cuda: cuEventRecord: %w", err)
	}
	c.recs = t + 1
	w.mu.Lock()
	w.progress[c.rank] = t + 1
	w.cond.Broadcast()
	w.mu.Unlock()
	return nil
}

// do enqueues one action: mine are this rank's buffers, left the left
// neighbour's.
func (c *Comm) do(p *plan, x action, mine, left [numBufs]uintptr) error {
	addr := func(b [numBufs]uintptr, s span) uintptr { return b[s.buf] + uintptr(s.off) }
	switch x.kind {
	case actLocalCopy:
		return c.copy(addr(mine, x.out), addr(mine, x.a), x.out.n)
	case actCopy:
		return c.copy(addr(mine, x.out), addr(left, x.b), x.out.n)
	}
	name, err := stepKernel(p.op, p.dt, x.last)
	if err != nil {
		return err
	}
	return c.w.dev.launchReduce(c.stream, name, addr(mine, x.out), addr(mine, x.a), addr(left, x.b), x.out.n/p.dt.Size(), c.w.n)
}

func (c *Comm) copy(dst, src uintptr, n int) error {
	if n == 0 || dst == src {
		return nil
	}
	if err := cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), int64(n), c.stream); err != nil {
		return fmt.Errorf("cuda: cuMemcpyDtoDAsync: %w", err)
	}
	return nil
}

// ensureScratch makes the scratch buffer at least n bytes. Growing it
// waits for the stream first: the previous collective's tail guarantees
// no neighbour reads the old one after that.
func (c *Comm) ensureScratch(ctx context.Context, n int) error {
	if c.scratch != nil && c.scratch.Bytes() >= n {
		return nil
	}
	if c.scratch != nil {
		if err := c.Synchronize(ctx); err != nil {
			return err
		}
		if err := c.scratch.Free(); err != nil {
			return err
		}
		c.scratch = nil
	}
	b, err := c.w.dev.Alloc(n)
	if err != nil {
		return err
	}
	c.scratch = b
	return nil
}
