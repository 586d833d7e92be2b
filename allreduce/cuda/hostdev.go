package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// The host device: the backend on host memory. It executes exactly what
// World and Comm enqueue, with the asynchrony of a GPU: each stream is a
// goroutine that runs its operations later than they are enqueued, in
// order, each after a random pause of up to the stream delay; an event
// completes when its stream reaches it, and a stream that waits for an
// event runs nothing further until then. Kernels are package allreduce's
// host combine (and Avg's division), so results are the host ring's.
// Operations of different streams touch the same host bytes, so under
// the race detector a missing event wait is a reported data race, and
// with a delay it is also a wrong result.

// HostOption configures a HostSystem's devices.
type HostOption func(*hostBackend)

// WithStreamDelay makes the streams' operations run late: one in 16 waits
// a random time in [0, d) before it runs, the others yield the processor
// up to twice (seeded: each stream of each device its own sequence), so
// that work not ordered by events runs in varied orders.
func WithStreamDelay(d time.Duration) HostOption { return func(h *hostBackend) { h.delay = d } }

// WithLaunchFault makes launchReduce fail with the error f returns (nil:
// no fault) for the i-th launch (from 0) of the device's kernel named
// kernel: a failed launch.
func WithLaunchFault(f func(kernel string, i int) error) HostOption {
	return func(h *hostBackend) { h.launchFault = f }
}

// WithStall makes the i-th kernel launch (from 0) for which stall returns
// true never complete (until the device is closed): a hung stream.
func WithStall(stall func(i int) bool) HostOption { return func(h *hostBackend) { h.stall = stall } }

// WithSeed seeds the stream delays (default 1).
func WithSeed(seed uint64) HostOption { return func(h *hostBackend) { h.seed = seed } }

// Open makes a host device: a new context on GPU ordinal of the system.
// Every call makes another context, as cuCtxCreate does.
func (s *HostSystem) Open(ordinal int) (*Device, error) {
	if ordinal < 0 {
		return nil, fmt.Errorf("%w: GPU %d", allreduce.ErrInvalid, ordinal)
	}
	h := &hostBackend{sys: s, ordinal: ordinal, ctx: s.newContext(), seed: 1, closed: make(chan struct{})}
	for _, o := range s.opts {
		o(h)
	}
	return newDevice(h, ordinal)
}

// NewHostDevice is a host device on a system of its own.
func NewHostDevice(opts ...HostOption) (*Device, error) { return NewHostSystem(opts...).Open(0) }

type hostBackend struct {
	sys         *HostSystem
	ordinal     int
	ctx         uintptr
	delay       time.Duration
	seed        uint64
	launchFault func(string, int) error
	stall       func(int) bool

	mu       sync.Mutex
	launches map[string]int
	all      int // every launch
	streams  int
	closed   chan struct{} // closed by close: releases stalled operations
	once     sync.Once
}

func (h *hostBackend) name() string {
	return fmt.Sprintf("host device %d (context %#x)", h.ordinal, h.ctx)
}
func (h *hostBackend) multiprocessors() int { return 1 }
func (h *hostBackend) contextID() uintptr   { return h.ctx }

func (h *hostBackend) alloc(bytes int) (uintptr, error) {
	return h.sys.alloc(bytes, h.ctx, h.ordinal), nil
}
func (h *hostBackend) free(p uintptr) error { return h.sys.free(p, h.ctx) }
func (h *hostBackend) pointerInfo(p uintptr) (memInfo, error) {
	return h.sys.info(p)
}

func (h *hostBackend) close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

// launchReduce resolves the three ranges now (a bad address faults the
// stream when the kernel runs, as on a GPU) and enqueues the combine.
func (h *hostBackend) launchReduce(s stream, kernel string, out, a, b uintptr, n, nranks int) error {
	op, dt, err := parseKernel(kernel)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.launches == nil {
		h.launches = map[string]int{}
	}
	i, all := h.launches[kernel], h.all
	h.launches[kernel]++
	h.all++
	h.mu.Unlock()
	if h.launchFault != nil {
		if err := h.launchFault(kernel, i); err != nil {
			return err
		}
	}
	stall := h.stall != nil && h.stall(all)
	nb := n * dt.Size()
	ob, e1 := h.sys.bytes(out, nb, h.ctx)
	ab, e2 := h.sys.bytes(a, nb, h.ctx)
	bb, e3 := h.sys.bytes(b, nb, h.ctx)
	return h.enqueue(s, func() error {
		if stall {
			<-h.closed
			return errors.New("device closed under a stalled kernel")
		}
		if err := errors.Join(e1, e2, e3); err != nil {
			return fmt.Errorf("%s: %w", kernel, err)
		}
		return hostKernel(op, dt, ob, ab, bb, nranks)
	})
}

// hostKernel is out = a op b, Avg's last step dividing by nranks: the
// host ring's arithmetic.
func hostKernel(op allreduce.ReduceOp, dt allreduce.DType, out, a, b []byte, nranks int) error {
	hop := op
	if op == allreduce.Avg {
		hop = allreduce.Sum
	}
	if err := allreduce.Combine(dt, hop, out, a, b); err != nil {
		return err
	}
	if op == allreduce.Avg {
		divideBytes(dt, out, nranks)
	}
	return nil
}

func divideBytes(dt allreduce.DType, b []byte, n int) {
	switch dt {
	case allreduce.Float32:
		x := elemsOf[float32](b)
		for i := range x {
			x[i] /= float32(n)
		}
	case allreduce.Float64:
		x := elemsOf[float64](b)
		for i := range x {
			x[i] /= float64(n)
		}
	}
}

func (h *hostBackend) launchNop(s stream) error { return h.enqueue(s, func() error { return nil }) }

func (h *hostBackend) copyAsync(s stream, dst, src uintptr, n int) error {
	db, e1 := h.sys.bytes(dst, n, h.ctx)
	sb, e2 := h.sys.bytes(src, n, h.ctx)
	return h.enqueue(s, func() error {
		if err := errors.Join(e1, e2); err != nil {
			return fmt.Errorf("device-to-device copy: %w", err)
		}
		copy(db, sb)
		return nil
	})
}

func (h *hostBackend) uploadAsync(s stream, dst uintptr, src []byte) error {
	db, err := h.sys.bytes(dst, len(src), h.ctx)
	return h.enqueue(s, func() error {
		if err != nil {
			return fmt.Errorf("host-to-device copy: %w", err)
		}
		copy(db, src)
		return nil
	})
}

func (h *hostBackend) downloadAsync(s stream, dst []byte, src uintptr) error {
	sb, err := h.sys.bytes(src, len(dst), h.ctx)
	return h.enqueue(s, func() error {
		if err != nil {
			return fmt.Errorf("device-to-host copy: %w", err)
		}
		copy(dst, sb)
		return nil
	})
}

func (h *hostBackend) enqueue(s stream, op func() error) error {
	hs, ok := s.(*hostStream)
	if !ok || hs.dev != h {
		return fmt.Errorf("stream %v is not a stream of %s", s, h.name())
	}
	return hs.push(op)
}

func (h *hostBackend) newStream() (stream, error) {
	h.mu.Lock()
	h.streams++
	id := h.streams
	h.mu.Unlock()
	s := &hostStream{dev: h, id: id, rng: rand.New(rand.NewPCG(h.seed, uint64(id)))}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

func (h *hostBackend) newEvent(timing bool) (event, error) {
	e := &hostEvent{dev: h, timing: timing}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

// parseKernel is kernelName's inverse.
func parseKernel(name string) (allreduce.ReduceOp, allreduce.DType, error) {
	for _, dt := range DTypes {
		for _, op := range Ops {
			if k, err := kernelName(op, dt); err == nil && k == name {
				return op, dt, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no kernel %q", name)
}
