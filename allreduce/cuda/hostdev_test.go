package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"gorgonia.org/tensor"
)

// The host device's own tests: its fault injection drives the error
// paths of World and Comm (a hung stream, a failed launch, a fault on
// the stream), and its asynchrony makes ordering bugs visible.

// hostWorld is an n-rank World on a fresh host device with opts, and
// one float32 buffer of count elements per rank holding rank+1.
func hostWorld(t *testing.T, n, count int, opts []HostOption, wopts ...Option) (*World, []*Buffer) {
	t.Helper()
	dev, err := NewHostDevice(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	w, err := NewWorld(dev, n, wopts...)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]*Buffer, n)
	for r := range bufs {
		if bufs[r], err = dev.Alloc(4 * count); err != nil {
			t.Fatal(err)
		}
		vals := make([]float32, count)
		for i := range vals {
			vals[i] = float32(r + 1)
		}
		if err := Upload(context.Background(), dev, bufs[r].Slice(allreduce.Float32, 0, count), vals); err != nil {
			t.Fatal(err)
		}
	}
	return w, bufs
}

// TestHungStream: a kernel that never completes makes the collective
// fail at its deadline on every rank, naming the stream, and Close
// report it instead of hanging.
func TestHungStream(t *testing.T) {
	w, bufs := hostWorld(t, 3, 300, []HostOption{WithStall(func(i int) bool { return i == 4 })}, WithCloseTimeout(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := runAll(w, func(c *Comm) error {
		return c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, 300), allreduce.Sum)
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("hung stream: err %v, want a deadline error naming the stream", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("hung stream: returned after %v", d)
	}
	t.Log(err)
	// The World is poisoned: the next call fails at once with the first error.
	if err2 := w.Comm(0).AllReduce(context.Background(), bufs[0].Slice(allreduce.Float32, 0, 300), allreduce.Sum); err2 == nil {
		t.Fatal("a poisoned world accepted another collective")
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("Close of a world with a hung stream: %v", err)
	}
}

// TestFailedLaunch: a launch that fails on one rank fails the collective
// on every rank (no rank hangs waiting for it), with the launch's error.
func TestFailedLaunch(t *testing.T) {
	boom := errors.New("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (injected)")
	fault := WithLaunchFault(func(kernel string, i int) error {
		if kernel == "ringddp_sum_f32" && i == 5 {
			return boom
		}
		return nil
	})
	w, bufs := hostWorld(t, 4, 1000, []HostOption{fault}, WithSegmentBytes(256))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 4)
	_ = runAll(w, func(c *Comm) error {
		errs[c.Rank()] = c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, 1000), allreduce.Sum)
		return nil
	})
	if ctx.Err() != nil {
		t.Fatal("the ranks waited until the deadline")
	}
	for r, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("rank %d: %v, want the injected launch error", r, err)
		}
	}
	_ = w.Close()
}

// TestStreamFault: a kernel that reads past its buffer faults the stream
// (as an illegal address does on a GPU): Synchronize returns the fault.
func TestStreamFault(t *testing.T) {
	w, bufs := hostWorld(t, 2, 100, nil)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runAll(w, func(c *Comm) error {
		s := bufs[c.Rank()].Slice(allreduce.Float32, 0, 100)
		s.Len = 1000 // past the allocation
		return c.AllReduce(ctx, s, allreduce.Sum)
	})
	if err == nil || !strings.Contains(err.Error(), "illegal address") || ctx.Err() != nil {
		t.Fatalf("reading past the buffer: %v (ctx %v), want an illegal-address fault", err, ctx.Err())
	}
}

// TestZeroLengthMismatch: a zero-length call facing a non-empty one is an
// error on every rank, not a hang; zero-length calls on every rank work.
func TestZeroLengthMismatch(t *testing.T) {
	w, bufs := hostWorld(t, 3, 10, nil)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runAll(w, func(c *Comm) error {
		return c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, 0), allreduce.Sum)
	}); err != nil {
		t.Fatalf("zero-length on every rank: %v", err)
	}
	err := runAll(w, func(c *Comm) error {
		count := 10
		if c.Rank() == 1 {
			count = 0
		}
		return c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, count), allreduce.Sum)
	})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "mismatched") {
		t.Fatalf("zero-length against 10: %v (ctx %v), want a mismatch error", err, ctx.Err())
	}
	t.Log(err)
}

// TestUploadOrdersBeforeCollective (B1): values uploaded with Upload or
// Comm.Upload are what the next collective reads, with the streams
// running late (a plain copy that returned before the data landed would
// give the old values, and a data race under -race).
func TestUploadOrdersBeforeCollective(t *testing.T) {
	const n, count = 3, 2000
	w, bufs := hostWorld(t, n, count, []HostOption{WithStreamDelay(2 * time.Millisecond)}, WithSegmentBytes(1024))
	defer w.Close()
	ctx := context.Background()
	dev := w.Device()
	for round := 0; round < 4; round++ {
		err := runAll(w, func(c *Comm) error {
			r := c.Rank()
			s := bufs[r].Slice(allreduce.Float32, 0, count)
			vals := make([]float32, count)
			for i := range vals {
				vals[i] = float32(10*round + r)
			}
			var err error
			if round%2 == 0 {
				// The transfer stream is busy for a while: an upload that
				// returned before its copy ran would leave old values.
				_ = dev.transfer.(*hostStream).push(func() error { time.Sleep(20 * time.Millisecond); return nil })
				err = Upload(ctx, dev, s, vals)
			} else {
				err = c.Upload(ctx, s, bytesOf(vals))
			}
			if err != nil {
				return err
			}
			return c.AllReduce(ctx, s, allreduce.Sum)
		})
		if err != nil {
			t.Fatal(err)
		}
		want := float32(n*10*round + n*(n-1)/2)
		for r := range bufs {
			got := make([]float32, count)
			if err := Download(ctx, dev, got, bufs[r].Slice(allreduce.Float32, 0, count)); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if v != want {
					t.Fatalf("round %d rank %d element %d: %v, want %v", round, r, i, v, want)
				}
			}
		}
	}
}

// TestHostDeviceShowsUnorderedUpload: the host device makes the old
// ordering bug visible: a copy enqueued on another stream without
// waiting for it (what a legacy-stream copy is to a non-blocking stream)
// lands after the collective has read the buffer.
func TestHostDeviceShowsUnorderedUpload(t *testing.T) {
	if raceEnabled {
		t.Skip("provokes a data race on purpose: the race detector would report it (which is the point, but fails the run)")
	}
	w, bufs := hostWorld(t, 2, 64, nil)
	defer w.Close()
	ctx := context.Background()
	dev := w.Device()
	slow := dev.transfer.(*hostStream)
	if err := slow.push(func() error { time.Sleep(100 * time.Millisecond); return nil }); err != nil {
		t.Fatal(err)
	}
	sevens := bytes.Repeat([]byte{0, 0, 0xe0, 0x40}, 64) // 7.0f
	for r := range bufs {
		if err := dev.b.uploadAsync(dev.transfer, bufs[r].Uintptr(), sevens); err != nil {
			t.Fatal(err)
		}
	}
	if err := runAll(w, func(c *Comm) error {
		return c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, 64), allreduce.Sum)
	}); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 64)
	time.Sleep(200 * time.Millisecond) // not a query: that would order the late copy after this goroutine's view
	if err := syncStream(ctx, dev.transfer, "transfer"); err != nil {
		t.Fatal(err)
	}
	if err := w.Comm(0).Download(ctx, bytesOf(got), bufs[0].Slice(allreduce.Float32, 0, 64)); err != nil {
		t.Fatal(err)
	}
	// Ordered, the collective would sum the sevens: 14. Unordered, it
	// summed the old values (1 + 2) and the late upload then overwrote
	// that result with 7.
	if got[0] != 7 {
		t.Fatalf("element 0 = %v: the unordered upload was not late (want 7: the collective's result overwritten by the upload)", got[0])
	}
}

// TestTensorContext (B2): memory of another context on the same GPU is
// refused, naming both contexts; managed memory is accepted.
func TestTensorContext(t *testing.T) {
	sys := NewHostSystem()
	a, err := sys.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sys.Open(0) // a second context on GPU 0, as gorgonia's engine makes
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w, err := NewWorld(a, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	other, err := b.Alloc(4 * 6)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	tt, err := NewTensor(other, tensor.Float32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	err = AllReduceTensor(context.Background(), w.Comm(0), tt, allreduce.Sum)
	if !errors.Is(err, allreduce.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("context %#x", b.Context())) {
		t.Fatalf("memory of another context: %v, want ErrInvalid naming context %#x", err, b.Context())
	}
	t.Log(err)
	m := managedMem{sys.AllocManaged(4 * 6), 4 * 6}
	defer sys.FreeManaged(m.p)
	mt, err := NewTensor(m, tensor.Float32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := AllReduceTensor(context.Background(), w.Comm(0), mt, allreduce.Sum); err != nil {
		t.Fatalf("managed memory: %v", err)
	}
	short := managedMem{sys.AllocManaged(8), 4 * 6} // claims 24 bytes of an 8-byte allocation
	defer sys.FreeManaged(short.p)
	st, err := NewTensor(short, tensor.Float32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := AllReduceTensor(context.Background(), w.Comm(0), st, allreduce.Sum); !errors.Is(err, allreduce.ErrInvalid) || !strings.Contains(err.Error(), "runs past") {
		t.Fatalf("a tensor past its allocation: %v, want ErrInvalid", err)
	}
}

type managedMem struct {
	p uintptr
	n int
}

func (m managedMem) Uintptr() uintptr { return m.p }
func (m managedMem) MemSize() uintptr { return uintptr(m.n) }

// TestBenchOnHostDevice: the benchmark's code path (check included) on
// the host device: every row checked, none wrong.
func TestBenchOnHostDevice(t *testing.T) {
	dev, err := NewHostDevice()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var out bytes.Buffer
	cfg := BenchConfig{Ranks: 3, Op: allreduce.KindAllReduce, DType: allreduce.Float32, Redop: allreduce.Avg,
		Min: 4, Max: 4 << 10, Factor: 8, Iters: 2, Warmup: 1, Check: true, SegBytes: 512}
	if err := BenchOn(context.Background(), dev, cfg, &out); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 13 || strings.HasPrefix(line, "#") {
			continue
		}
		rows++
		if f[9] != "0" {
			t.Errorf("bench row %q: %s wrong elements", line, f[9])
		}
	}
	if rows != 4 { // 4, 32, 256, 2048 bytes
		t.Fatalf("%d rows, want 4:\n%s", rows, out.String())
	}
}
