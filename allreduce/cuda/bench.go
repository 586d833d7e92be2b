package cuda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// BenchConfig is one run of Bench: cmd/bench -transport cuda.
type BenchConfig struct {
	Device   int                // GPU ordinal
	Ranks    int                // ranks on that GPU
	Op       allreduce.Kind     // KindAllReduce, KindReduceScatter or KindAllGather
	DType    allreduce.DType    //
	Redop    allreduce.ReduceOp //
	Min, Max int                // bytes (of AllReduce's buffer, ReduceScatter's source, AllGather's destination)
	Factor   int                // each size Factor times the last
	Iters    int                // timed iterations per size
	Warmup   int                // untimed iterations per size
	Check    bool               // check the result (reference.Input/Reduce) before timing
	SegBytes int                // WithSegmentBytes (0: default)
}

// Bench measures a device collective like cmd/bench measures the host
// ones (the same columns) and adds, per size, the time of one
// device-to-device copy of the minimum bytes and the ratio to it. For an
// N-rank AllReduce of M bytes the minimum is N·M bytes copied (every
// input read once, every rank's result written once: a copy of N·M bytes
// reads and writes exactly that); for ReduceScatter and AllGather of M
// bytes, N·M read and M written, or M read and N·M written: a copy of
// (N+1)·M/2 bytes. The header also gives the cost of an empty kernel
// launch (launch and wait), the floor of any small collective.
//
// Bench (`ringddp_cuda` tag) opens GPU cfg.Device; BenchOn runs on a
// Device of the caller's (the host device in tests).
func BenchOn(ctx context.Context, dev *Device, cfg BenchConfig, out io.Writer) error {
	if cfg.Ranks < 1 || cfg.Factor < 2 || cfg.Iters < 1 || cfg.Min < 1 || cfg.Max < cfg.Min {
		return fmt.Errorf("%w: bench config %+v", allreduce.ErrInvalid, cfg)
	}
	w, err := NewWorld(dev, cfg.Ranks, WithSegmentBytes(cfg.SegBytes))
	if err != nil {
		return err
	}
	defer w.Close()
	es := cfg.DType.Size()
	maxCount := cfg.Max / es
	bufs := make([]*Buffer, cfg.Ranks)
	srcs := make([]*Buffer, cfg.Ranks)
	for r := range bufs {
		if bufs[r], err = dev.Alloc(maxCount * es); err != nil {
			return err
		}
		defer bufs[r].Free()
		if cfg.Op != allreduce.KindAllReduce {
			if srcs[r], err = dev.Alloc(maxCount * es); err != nil {
				return err
			}
			defer srcs[r].Free()
		}
	}
	copyBuf, err := dev.Alloc(2 * cfg.Ranks * maxCount * es) // a copy of up to N·M bytes within it
	if err != nil {
		return err
	}
	defer copyBuf.Free()
	launch, err := nopLatency(ctx, w.Comm(0), cfg.Iters+cfg.Warmup)
	if err != nil {
		return err
	}
	name := map[allreduce.Kind]string{allreduce.KindAllReduce: "allreduce", allreduce.KindReduceScatter: "reducescatter", allreduce.KindAllGather: "allgather"}[cfg.Op]
	fmt.Fprintf(out, "# ringddp bench: op %s, transport cuda, ranks %d on GPU %d (%s, %d SMs), dtype %v, redop %v, iters %d, warmup %d, check %v\n",
		name, cfg.Ranks, dev.Ordinal(), dev.Name(), dev.Multiprocessors(), cfg.DType, cfg.Redop, cfg.Iters, cfg.Warmup, cfg.Check)
	fmt.Fprintf(out, "# aligned: whether every rank's chunk starts on 16 bytes (the kernels' vector path; otherwise their scalar loop)\n")
	fmt.Fprintf(out, "# time: median over iterations of the slowest rank; each rank times from a common host barrier to its stream's completion (enqueue + GPU + wait)\n")
	fmt.Fprintf(out, "# algbw = bytes / time; busbw = algbw * %s; copy: one device-to-device copy of the minimum bytes (see Bench); ratio = time / copy\n",
		map[string]string{"allreduce": "2(N-1)/N", "reducescatter": "(N-1)/N", "allgather": "(N-1)/N"}[name])
	fmt.Fprintf(out, "# bare kernel launch (empty kernel, launch + wait, median): %.2f us\n#\n", launch.Seconds()*1e6)
	fmt.Fprintf(out, "#%12s %12s %8s %6s %5s %12s %12s %8s %8s %7s %12s %7s %s\n", "size", "count", "type", "redop", "root", "algo", "time", "algbw", "busbw", "#wrong", "copy", "ratio", "aligned")
	fmt.Fprintf(out, "#%12s %12s %8s %6s %5s %12s %12s %8s %8s %7s %12s %7s\n", "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "")
	n := cfg.Ranks
	for size := cfg.Min; size <= cfg.Max; size *= cfg.Factor {
		count := max(1, size/es)
		if cfg.Op != allreduce.KindAllReduce {
			count = max(n, count/n*n)
		}
		bytes := count * es
		run := func(c *Comm) error {
			r := c.Rank()
			lo, hi := allreduce.ChunkBounds(count, n, r)
			switch cfg.Op {
			case allreduce.KindReduceScatter:
				return c.ReduceScatterAsync(ctx, bufs[r].Slice(cfg.DType, 0, hi-lo), srcs[r].Slice(cfg.DType, 0, count), cfg.Redop)
			case allreduce.KindAllGather:
				return c.AllGatherAsync(ctx, bufs[r].Slice(cfg.DType, 0, count), srcs[r].Slice(cfg.DType, 0, hi-lo))
			}
			return c.AllReduceAsync(ctx, bufs[r].Slice(cfg.DType, 0, count), cfg.Redop)
		}
		wrong := "-"
		if cfg.Check && cfg.Op == allreduce.KindAllReduce {
			k, err := benchCheck(ctx, w, bufs, cfg, count)
			if err != nil {
				return err
			}
			wrong = fmt.Sprint(k)
		}
		t, err := timeRanks(ctx, w, cfg.Warmup, cfg.Iters, run)
		if err != nil {
			return err
		}
		minBytes := n * bytes
		if cfg.Op != allreduce.KindAllReduce {
			minBytes = (n + 1) * bytes / 2
		}
		ct, err := copyTime(ctx, w.Comm(0), copyBuf, minBytes, cfg.Warmup, cfg.Iters)
		if err != nil {
			return err
		}
		sec := t.Seconds()
		algbw := float64(bytes) / sec / 1e9
		bus := algbw * float64(n-1) / float64(n)
		if cfg.Op == allreduce.KindAllReduce {
			bus *= 2
		}
		fmt.Fprintf(out, "%13d %12d %8s %6s %5d %12s %12.2f %8.2f %8.2f %7s %12.2f %7.2f %v\n",
			bytes, count, strings.ToLower(cfg.DType.String()), strings.ToLower(cfg.Redop.String()), -1, "ring",
			sec*1e6, algbw, bus, wrong, ct.Seconds()*1e6, sec/ct.Seconds(), ChunksAligned(count, n, cfg.DType))
	}
	return nil
}

// timeRanks runs every rank's call warmup+iters times: each iteration
// starts at a host barrier, each rank times enqueue to completion, and the
// iteration's time is the slowest rank's; the median iteration comes back.
func timeRanks(ctx context.Context, w *World, warmup, iters int, call func(*Comm) error) (time.Duration, error) {
	n := w.Size()
	times := make([][]time.Duration, n)
	bar := newBarrier(n)
	err := runAll(w, func(c *Comm) error {
		for i := 0; i < warmup+iters; i++ {
			bar.wait()
			t0 := time.Now()
			if err := call(c); err != nil {
				return err
			}
			if err := c.Synchronize(ctx); err != nil {
				return err
			}
			if i >= warmup {
				times[c.Rank()] = append(times[c.Rank()], time.Since(t0))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	per := make([]time.Duration, iters)
	for i := range per {
		for r := 0; r < n; r++ {
			per[i] = max(per[i], times[r][i])
		}
	}
	slices.Sort(per)
	return per[iters/2], nil
}

func runAll(w *World, fn func(*Comm) error) error {
	errs := make([]error, w.Size())
	var wg sync.WaitGroup
	for r := 0; r < w.Size(); r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = fn(w.Comm(r))
		}(r)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// barrier is a reusable host barrier for n goroutines.
type barrier struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n, in int
	gen   int
}

func newBarrier(n int) *barrier {
	b := &barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *barrier) wait() {
	b.mu.Lock()
	gen := b.gen
	b.in++
	if b.in == b.n {
		b.in = 0
		b.gen++
		b.cond.Broadcast()
	} else {
		for gen == b.gen {
			b.cond.Wait()
		}
	}
	b.mu.Unlock()
}

// copyTime is the median time of one device-to-device copy of n bytes
// (half of buf to its other half), timed with events on c's stream.
func copyTime(ctx context.Context, c *Comm, buf *Buffer, n, warmup, iters int) (time.Duration, error) {
	b := c.Device().b
	start, err := b.newEvent(true)
	if err != nil {
		return 0, err
	}
	defer start.destroy()
	end, err := b.newEvent(true)
	if err != nil {
		return 0, err
	}
	defer end.destroy()
	var ts []time.Duration
	for i := 0; i < warmup+iters; i++ {
		err := errors.Join(start.record(c.stream), b.copyAsync(c.stream, buf.Uintptr()+uintptr(n), buf.Uintptr(), n), end.record(c.stream))
		if err == nil {
			err = c.Synchronize(ctx)
		}
		var ms float64
		if err == nil {
			ms, err = end.elapsedSince(start)
		}
		if err != nil {
			return 0, fmt.Errorf("cuda: timing a copy: %w", err)
		}
		if i >= warmup {
			ts = append(ts, time.Duration(ms*1e6))
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// nopLatency is the median time to launch the empty kernel and wait for
// it, on the host clock, the same way the collectives are timed.
func nopLatency(ctx context.Context, c *Comm, iters int) (time.Duration, error) {
	var ts []time.Duration
	for i := 0; i < iters+10; i++ {
		t0 := time.Now()
		if err := c.Device().b.launchNop(c.stream); err != nil {
			return 0, err
		}
		if err := c.Synchronize(ctx); err != nil {
			return 0, err
		}
		if i >= 10 {
			ts = append(ts, time.Since(t0))
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// ChunksAligned reports whether every chunk of an n-rank collective of
// count elements of dt starts 16-byte aligned (given a 256-byte aligned
// buffer, as Alloc's): the condition for the kernels' vector path. A
// count that is not a multiple of n·16/size(dt) makes some chunks start
// unaligned, and their reduces use the kernels' scalar loop, which is
// correct but slower (scripts/gpu-check.sh measures by how much).
func ChunksAligned(count, n int, dt allreduce.DType) bool {
	for r := 0; r < n; r++ {
		if lo, _ := allreduce.ChunkBounds(count, n, r); lo*dt.Size()%16 != 0 {
			return false
		}
	}
	return true
}
