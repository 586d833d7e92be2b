package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/run/reference"
	"gorgonia.org/tensor"
)

// The device tests run on testDev: the host device in every build, a GPU
// with the ringddp_cuda tag (openTestDevice). RINGDDP_CUDA_BIG=1 adds
// lengths up to 256 MiB (for the GPU: scripts/gpu-check.sh).

var testDev *Device

func TestMain(m *testing.M) {
	d, done, err := openTestDevice()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests: no device:", err)
		os.Exit(1)
	}
	testDev = d
	code := m.Run()
	done()
	os.Exit(code)
}

func big() bool { b, _ := strconv.ParseBool(os.Getenv("RINGDDP_CUDA_BIG")); return b }

// sampler thins a test's combinations on the host device (a GPU runs
// them all): take() is true for one candidate in every, in rotation, so
// that every combination still runs in some configuration.
type sampler struct{ i, every int }

func (s *sampler) take() bool {
	s.i++
	return onGPU || s.i%s.every == 0
}

// devBytes is host bytes on the device.
func devBytes(t testing.TB, b []byte) *Buffer {
	t.Helper()
	buf, err := testDev.Alloc(max(len(b), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := testDev.uploadBytes(context.Background(), buf.Uintptr(), b); err != nil {
		t.Fatal(err)
	}
	return buf
}

func hostBytes(t testing.TB, buf *Buffer, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if n == 0 {
		return out
	}
	if err := testDev.downloadBytes(context.Background(), out, buf.Uintptr()); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKernelsMatchHost: every kernel on special values (NaN payloads, ±0,
// ±Inf, denormals) against the host kernel, bitwise, aligned (vector path)
// and misaligned (scalar path).
func TestKernelsMatchHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w, err := NewWorld(testDev, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := w.Comm(0)
	for _, dt := range DTypes {
		for _, op := range Ops {
			if op == allreduce.Avg && !dt.IsFloat() {
				continue
			}
			for _, shift := range []int{0, 1} {
				n := 100003
				if !onGPU {
					n = 1003 // the host device runs the host's own combine: the source's check is TestKernelSourceOnHost
				}
				es := dt.Size()
				a, b := randomBytes(rng, dt, n+shift), randomBytes(rng, dt, n+shift)
				da, db, dout := devBytes(t, a), devBytes(t, b), devBytes(t, make([]byte, len(a)))
				name, _ := kernelName(op, dt)
				off := uintptr(shift * es)
				err := testDev.b.launchReduce(c.stream, name, dout.Uintptr()+off, da.Uintptr()+off, db.Uintptr()+off, n, 3)
				if err == nil {
					err = c.Synchronize(context.Background())
				}
				if err != nil {
					t.Fatal(err)
				}
				got := hostBytes(t, dout, len(a))[shift*es:]
				hostOp := op
				if op == allreduce.Avg {
					hostOp = allreduce.Sum
				}
				want := make([]byte, n*es)
				if err := allreduce.Combine(dt, hostOp, want, a[shift*es:], b[shift*es:]); err != nil {
					t.Fatal(err)
				}
				if op == allreduce.Avg {
					divideHost(dt, want, 3)
				}
				if !bytes.Equal(got, want) {
					i := firstDiff(got, want) / es
					t.Errorf("%s shift %d: element %d: got % x, want % x (a % x, b % x)", name, shift, i,
						got[i*es:(i+1)*es], want[i*es:(i+1)*es], a[(shift+i)*es:(shift+i+1)*es], b[(shift+i)*es:(shift+i+1)*es])
				}
				for _, x := range []*Buffer{da, db, dout} {
					_ = x.Free()
				}
			}
		}
	}
}

// TestMatrix is the correctness matrix: ranks 1..8 on one device, every
// primitive (AllReduce, ReduceScatter, AllGather), every op and dtype,
// lengths 0, 1, N-1, N+1 (not divisible by N) and 1000, plain and in
// small segments, against an independent host reference (reference.Reduce
// of reference.Input's small integers, exact in any order; AllGather: the
// ranks' inputs side by side), every rank bitwise equal to it. On the host
// device it runs a rotating third of the combinations. RINGDDP_CUDA_BIG=1
// (the GPU script) adds, on 4 ranks, lengths of several 16 MiB segments a
// step for three op/dtype pairs and 256 MiB for float32 Sum and Avg, with
// the host input built on every core: a matrix that fits in two minutes.
func TestMatrix(t *testing.T) {
	ctx := context.Background()
	pick := sampler{every: 3}
	kinds := []allreduce.Kind{allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindAllGather}
	for n := 1; n <= 8; n++ {
		for _, seg := range []int{0, 64} {
			w, err := NewWorld(testDev, n, WithSegmentBytes(seg))
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range kinds {
				for _, dt := range DTypes {
					for _, op := range Ops {
						if op == allreduce.Avg && !dt.IsFloat() || kind == allreduce.KindAllGather && op != allreduce.Sum {
							continue
						}
						for _, count := range matrixLengths(n, seg, kind, dt, op) {
							if count >= 1<<20 || pick.take() {
								c := collective{kind: kind, dt: dt, op: op, count: count}
								if err := checkCollective(ctx, t, w, c); err != nil {
									t.Fatalf("n=%d seg=%d %v: %v", n, seg, c, err)
								}
							}
						}
					}
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func matrixLengths(n, seg int, kind allreduce.Kind, dt allreduce.DType, op allreduce.ReduceOp) []int {
	lengths := []int{0, 1, max(n-1, 0), n + 1, 1000}
	if !big() || seg != 0 || n != 4 || kind != allreduce.KindAllReduce {
		return lengths
	}
	if dt == allreduce.Float32 && op == allreduce.Sum || dt == allreduce.Float64 && op == allreduce.Max || dt == allreduce.Int64 && op == allreduce.Sum {
		lengths = append(lengths, (n*40<<20)/dt.Size()+n-1) // three segments a step, chunks not aligned
	}
	if dt == allreduce.Float32 && (op == allreduce.Sum || op == allreduce.Avg) {
		lengths = append(lengths, 256<<20/dt.Size()) // the goals' size
	}
	return lengths
}

// checkCollective runs c on every rank of w and compares every rank's
// result with the reference.
func checkCollective(ctx context.Context, t *testing.T, w *World, c collective) error {
	n, es := w.Size(), c.dt.Size()
	inputs := make([][]byte, n)
	parallel(n, func(r int) { inputs[r] = inputBytes(c.dt, uint64(c.count), r, c.count, c.op) })
	want := make([][]byte, n)
	if c.count > 0 {
		switch c.kind {
		case allreduce.KindAllGather:
			all := make([]byte, 0, c.count*es)
			for r := range inputs {
				lo, hi := chunk(c.count, n, r, es)
				all = append(all, inputs[r][lo:hi]...)
			}
			for r := range want {
				want[r] = all
			}
		default:
			all := referenceBytes(c.dt, inputs, c.op)
			for r := range want {
				want[r] = all
				if c.kind == allreduce.KindReduceScatter {
					lo, hi := chunk(c.count, n, r, es)
					want[r] = all[lo:hi]
				}
			}
		}
	}
	src, dst := make([]*Buffer, n), make([]*Buffer, n)
	defer func() {
		for r := range src {
			_, _ = src[r].Free(), dst[r].Free()
		}
	}()
	for r := range src {
		lo, hi := chunk(c.count, n, r, es)
		src[r] = devBytes(t, inputs[r])
		switch c.kind {
		case allreduce.KindAllReduce:
			dst[r] = src[r]
		case allreduce.KindReduceScatter:
			dst[r] = devBytes(t, make([]byte, hi-lo))
		default:
			dst[r] = devBytes(t, make([]byte, c.count*es))
		}
	}
	err := runAll(w, func(cm *Comm) error {
		r := cm.Rank()
		lo, hi := chunk(c.count, n, r, es)
		switch c.kind {
		case allreduce.KindAllReduce:
			return cm.AllReduce(ctx, src[r].Slice(c.dt, 0, c.count), c.op)
		case allreduce.KindReduceScatter:
			return cm.ReduceScatter(ctx, dst[r].Slice(c.dt, 0, (hi-lo)/es), src[r].Slice(c.dt, 0, c.count), c.op)
		}
		return cm.AllGather(ctx, dst[r].Slice(c.dt, 0, c.count), src[r].Slice(c.dt, lo/es, (hi-lo)/es))
	})
	if err != nil {
		return err
	}
	for r := range dst {
		got := hostBytes(t, dst[r], len(want[r]))
		if !bytes.Equal(got, want[r]) {
			return fmt.Errorf("rank %d differs from the host reference at element %d", r, firstDiff(got, want[r])/es)
		}
	}
	return nil
}

// parallel runs f(0..n-1) at once.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

func inputBytes(dt allreduce.DType, seed uint64, rank, n int, op allreduce.ReduceOp) []byte {
	switch dt {
	case allreduce.Float32:
		return asBytes(reference.Input[float32](seed, rank, n, op))
	case allreduce.Float64:
		return asBytes(reference.Input[float64](seed, rank, n, op))
	case allreduce.Int32:
		return asBytes(reference.Input[int32](seed, rank, n, op))
	}
	return asBytes(reference.Input[int64](seed, rank, n, op))
}

func referenceBytes(dt allreduce.DType, inputs [][]byte, op allreduce.ReduceOp) []byte {
	switch dt {
	case allreduce.Float32:
		return asBytes(reference.Reduce(typed[float32](inputs), op))
	case allreduce.Float64:
		return asBytes(reference.Reduce(typed[float64](inputs), op))
	case allreduce.Int32:
		return asBytes(reference.Reduce(typed[int32](inputs), op))
	}
	return asBytes(reference.Reduce(typed[int64](inputs), op))
}

func typed[T allreduce.Numeric](in [][]byte) [][]T {
	out := make([][]T, len(in))
	for i, b := range in {
		out[i] = elems[T](b)
	}
	return out
}

// TestMatchesHostRing: on special values the device collectives are
// bitwise the host ring's (package allreduce over inproc, algorithm
// ring): AllReduce, ReduceScatter and AllGather, in place and not, plain
// and segmented.
func TestMatchesHostRing(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	pick := sampler{every: 7}
	for _, pc := range planCases(nil) {
		if pc.segBytes == 24 {
			continue
		}
		w, err := NewWorld(testDev, pc.n, WithSegmentBytes(pc.segBytes))
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range DTypes {
			ops := Ops
			if pc.kind == allreduce.KindAllGather {
				ops = []allreduce.ReduceOp{0}
			}
			for _, op := range ops {
				if op == allreduce.Avg && !dt.IsFloat() || !pick.take() {
					continue
				}
				c := collective{kind: pc.kind, dt: dt, op: op, count: pc.count}
				if err := checkAgainstHostRing(ctx, t, rng, w, c, pc); err != nil {
					t.Fatalf("%v inplace=%v n=%d seg=%d: %v", c, pc.inPlace, pc.n, pc.segBytes, err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func checkAgainstHostRing(ctx context.Context, t *testing.T, rng *rand.Rand, w *World, c collective, pc planCase) error {
	n, es := pc.n, c.dt.Size()
	inputs := make([][]byte, n)
	for r := range inputs {
		inputs[r] = randomBytes(rng, c.dt, c.count)
	}
	want := hostRing(t, c, pc, inputs)
	var free []*Buffer
	defer func() {
		for _, b := range free {
			_ = b.Free()
		}
	}()
	outs := make([]func() []byte, n)
	calls := make([]func(*Comm) error, n)
	for r := 0; r < n; r++ {
		lo, hi := chunk(c.count, n, r, es)
		switch c.kind {
		case allreduce.KindAllReduce:
			b := devBytes(t, inputs[r])
			free = append(free, b)
			calls[r] = func(cm *Comm) error { return cm.AllReduce(ctx, b.Slice(c.dt, 0, c.count), c.op) }
			outs[r] = func() []byte { return hostBytes(t, b, c.count*es) }
		case allreduce.KindReduceScatter:
			src := devBytes(t, inputs[r])
			free = append(free, src)
			dst, dlo := src, lo/es
			if !pc.inPlace {
				dst = devBytes(t, make([]byte, hi-lo))
				free = append(free, dst)
				dlo = 0
			}
			calls[r] = func(cm *Comm) error {
				return cm.ReduceScatter(ctx, dst.Slice(c.dt, dlo, (hi-lo)/es), src.Slice(c.dt, 0, c.count), c.op)
			}
			outs[r] = func() []byte { return hostBytes(t, dst, dlo*es+hi-lo)[dlo*es:] }
		default:
			init := make([]byte, c.count*es)
			if pc.inPlace {
				copy(init[lo:hi], inputs[r][lo:hi])
			}
			dst := devBytes(t, init)
			src, slo := dst, lo/es
			if !pc.inPlace {
				src = devBytes(t, inputs[r][lo:hi])
				slo = 0
			}
			free = append(free, dst, src)
			calls[r] = func(cm *Comm) error {
				return cm.AllGather(ctx, dst.Slice(c.dt, 0, c.count), src.Slice(c.dt, slo, (hi-lo)/es))
			}
			outs[r] = func() []byte { return hostBytes(t, dst, c.count*es) }
		}
	}
	if err := runAll(w, func(cm *Comm) error { return calls[cm.Rank()](cm) }); err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		if got := outs[r](); !bytes.Equal(got, want[r]) {
			return fmt.Errorf("rank %d differs from the host ring at element %d", r, firstDiff(got, want[r])/es)
		}
	}
	return nil
}

// TestBackToBack: many collectives enqueued without waiting, on the same
// buffers (the events' reuse, the tail's guarantee that a neighbour has
// finished reading before the next call writes).
func TestBackToBack(t *testing.T) {
	ctx := context.Background()
	const n, count, rounds = 4, 4099, 200
	w, err := NewWorld(testDev, n, WithSegmentBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	bufs := make([]*Buffer, n)
	for r := range bufs {
		ones := make([]float32, count)
		for i := range ones {
			ones[i] = 1
		}
		bufs[r] = devBytes(t, asBytes(ones))
	}
	err = runAll(w, func(c *Comm) error {
		s := bufs[c.Rank()].Slice(allreduce.Float32, 0, count)
		for i := 0; i < rounds; i++ {
			op := allreduce.Avg // Avg of equal values: stays 1
			if i%2 == 1 {
				op = allreduce.Max
			}
			if err := c.AllReduceAsync(ctx, s, op); err != nil {
				return err
			}
		}
		return c.Synchronize(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range bufs {
		for i, v := range elems[float32](hostBytes(t, bufs[r], 4*count)) {
			if v != 1 {
				t.Fatalf("rank %d element %d = %v after %d rounds, want 1", r, i, v, rounds)
			}
		}
	}
}

// TestMismatch: ranks that call different collectives get an error, not a
// hang or a wrong result.
func TestMismatch(t *testing.T) {
	w, err := NewWorld(testDev, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	b, err := testDev.Alloc(4 * 100)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bufs := make([]*Buffer, 3)
	for r := range bufs {
		bufs[r], _ = testDev.Alloc(4 * 100)
		defer bufs[r].Free()
	}
	err = runAll(w, func(c *Comm) error {
		count := 100
		if c.Rank() == 2 {
			count = 99
		}
		return c.AllReduce(ctx, bufs[c.Rank()].Slice(allreduce.Float32, 0, count), allreduce.Sum)
	})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("mismatched counts: err %v (ctx %v), want a mismatch error", err, ctx.Err())
	}
	t.Log(err)
}

// TestTensor: the tensor entry points on device memory, and refusal of
// host memory.
func TestTensor(t *testing.T) {
	ctx := context.Background()
	const n = 3
	w, err := NewWorld(testDev, n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	shape := []int{5, 7}
	bufs := make([]*Buffer, n)
	inputs := make([][]byte, n)
	for r := range bufs {
		inputs[r] = inputBytes(allreduce.Float32, 1, r, 35, allreduce.Sum)
		bufs[r] = devBytes(t, inputs[r])
		defer bufs[r].Free()
	}
	want := referenceBytes(allreduce.Float32, inputs, allreduce.Sum)
	err = runAll(w, func(c *Comm) error {
		d, err := NewTensor(bufs[c.Rank()], tensor.Float32, shape...)
		if err != nil {
			return err
		}
		return AllReduceTensor(ctx, c, d, allreduce.Sum)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range bufs {
		if got := hostBytes(t, bufs[r], 35*4); !bytes.Equal(got, want) {
			t.Fatalf("rank %d: tensor all-reduce differs at %d", r, firstDiff(got, want)/4)
		}
	}
	host := tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
	if err := AllReduceTensor(ctx, w.Comm(0), host, allreduce.Sum); !errors.Is(err, allreduce.ErrInvalid) {
		t.Fatalf("host tensor: err %v, want ErrInvalid", err)
	}
}
