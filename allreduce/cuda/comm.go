package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// World is n ranks on one device, to be driven by n goroutines: rank r's
// collectives go through Comm(r). Every rank must make the same calls in
// the same order (like a host Group); a rank whose call differs from a
// neighbour's gets an error naming both, and the World is poisoned: every
// later call fails with the first error.
type World struct {
	dev          *Device
	n            int
	segBytes     int
	closeTimeout time.Duration
	comms        []*Comm

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

// WithCloseTimeout bounds how long Close waits for each rank's stream
// (default 60 s): a stream that has not finished by then is reported,
// and its scratch memory is left allocated rather than freed under a
// kernel that may still read it.
func WithCloseTimeout(d time.Duration) Option { return func(w *World) { w.closeTimeout = d } }

// eventRing is how many events a rank keeps; its event t reuses slot
// t mod eventRing once both neighbours have passed the waits on t - eventRing.
const eventRing = 4*maxSegments + 16

// NewWorld makes n ranks on dev, each with its own non-blocking stream.
func NewWorld(dev *Device, n int, opts ...Option) (*World, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a world of %d ranks", allreduce.ErrInvalid, n)
	}
	w := &World{dev: dev, n: n, closeTimeout: time.Minute, progress: make([]int64, n), posted: make([][4]postedCall, n)}
	w.cond = sync.NewCond(&w.mu)
	for _, o := range opts {
		o(w)
	}
	for r := 0; r < n; r++ {
		c := &Comm{w: w, rank: r}
		w.comms = append(w.comms, c)
		if err := c.init(); err != nil {
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

// init makes the rank's stream and events.
func (c *Comm) init() error {
	var err error
	if c.stream, err = c.w.dev.b.newStream(); err != nil {
		return fmt.Errorf("cuda: stream of rank %d: %w", c.rank, err)
	}
	c.events = make([]event, eventRing)
	for i := range c.events {
		if c.events[i], err = c.w.dev.b.newEvent(false); err != nil {
			return fmt.Errorf("cuda: event of rank %d: %w", c.rank, err)
		}
	}
	return nil
}

// Close waits for every rank's stream (at most the close timeout each)
// and releases streams, events and scratch memory.
func (w *World) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range w.comms {
		done := true
		if c.stream != nil {
			ctx, cancel := context.WithTimeout(context.Background(), w.closeTimeout)
			if err := syncStream(ctx, c.stream, fmt.Sprintf("rank %d's stream", c.rank)); err != nil {
				keep(fmt.Errorf("cuda: closing the world: %w", err))
				done = false
			}
			cancel()
			keep(c.stream.destroy())
		}
		for _, e := range c.events {
			if e != nil {
				keep(e.destroy())
			}
		}
		if c.scratch != nil && done {
			keep(c.scratch.Free())
		}
	}
	w.comms = nil
	return errors.Join(errs...)
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
	stream  stream
	events  []event
	recs    int64  // events recorded so far (the same count on every rank)
	seq     uint64 // collectives enqueued so far
	scratch *Buffer
}

// Rank is this rank; Size the world's; Stream the handle of the stream its
// collectives run on (a CUstream, non-blocking, on CUDA). A collective
// runs after everything enqueued on Stream before the call: put the work
// that produces the buffer there (or make Stream wait for it), and read
// the result after Synchronize or from work enqueued on Stream after the
// call.
func (c *Comm) Rank() int       { return c.rank }
func (c *Comm) Size() int       { return c.w.n }
func (c *Comm) Stream() uintptr { return c.stream.handle() }
func (c *Comm) Device() *Device { return c.w.dev }

// Synchronize waits until everything enqueued on the stream is done, or
// ctx is: a stream that does not finish in time poisons the World (its
// state is unknown) and the error says which rank's stream it was.
func (c *Comm) Synchronize(ctx context.Context) error {
	if err := syncStream(ctx, c.stream, fmt.Sprintf("rank %d's stream", c.rank)); err != nil {
		return c.w.fail(err)
	}
	return nil
}

// Upload copies host elements into s on the rank's stream (after
// everything enqueued on it before, before every collective enqueued
// after) and waits for the copy, so host may be reused on return.
func (c *Comm) Upload(ctx context.Context, s Slice, host []byte) error {
	if len(host) != s.Bytes() {
		return fmt.Errorf("%w: %d host bytes for device %v", allreduce.ErrInvalid, len(host), s)
	}
	if len(host) == 0 {
		return nil
	}
	if err := c.w.dev.b.uploadAsync(c.stream, s.Ptr, host); err != nil {
		return c.w.fail(fmt.Errorf("cuda: rank %d: upload of %v: %w", c.rank, s, err))
	}
	return c.Synchronize(ctx)
}

// Download copies s into host bytes on the rank's stream (after the
// collectives enqueued before) and waits for it.
func (c *Comm) Download(ctx context.Context, host []byte, s Slice) error {
	if len(host) != s.Bytes() {
		return fmt.Errorf("%w: %d host bytes for device %v", allreduce.ErrInvalid, len(host), s)
	}
	if len(host) == 0 {
		return nil
	}
	if err := c.w.dev.b.downloadAsync(c.stream, host, s.Ptr); err != nil {
		return c.w.fail(fmt.Errorf("cuda: rank %d: download of %v: %w", c.rank, s, err))
	}
	return c.Synchronize(ctx)
}

// syncStream waits until s has completed everything enqueued on it:
// spinning for the first 50 µs (small collectives), then sleeping a little
// longer each time, up to 1 ms, until ctx is done.
func syncStream(ctx context.Context, s stream, what string) error {
	start := time.Now()
	sleep := 5 * time.Microsecond
	for {
		err := s.query()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNotReady) {
			return fmt.Errorf("cuda: %s: %w", what, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cuda: %s has not finished after %v: %w", what, time.Since(start).Round(time.Millisecond), err)
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
