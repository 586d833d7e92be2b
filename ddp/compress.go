package ddp

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/numeric"
)

// Half names a 16-bit floating-point format a bucket is compressed to.
type Half uint8

// The 16-bit formats: IEEE binary16 (numeric.Float16; PyTorch's
// fp16_compress_hook) and bfloat16 (numeric.BFloat16;
// bf16_compress_hook).
const (
	FP16 Half = iota + 1
	BF16
)

func (h Half) String() string {
	switch h {
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("half(%d)", uint8(h))
}

// Compression is the 16-bit compression hook with error feedback: half
// the bytes of float32 on the wire (a quarter of float64's). For each
// bucket of this rank's gradient g, with e the bucket's error (zero at
// first) and N the group size:
//
//  1. y = g/N + e, element by element (PyTorch's hooks divide before
//     the all-reduce too, so that the 16-bit sum does not overflow);
//  2. c = y rounded to the 16-bit format (nearest, ties to even);
//  3. e = y − c, exactly: the rounding error, carried into the next step
//     (off: e stays zero, which is PyTorch's fp16/bf16_compress_hook);
//  4. the cs are summed over the group by the 16-bit all-reduce (Sum):
//     each combine step adds in float32 and rounds once to the 16-bit
//     format, identically on every rank, as NCCL does (docs/precision.md);
//     these roundings are not fed back, as no rank sees them;
//  5. the buffer gets that sum, widened.
type Compression[T Float] struct {
	format  Half
	feed    bool
	buckets map[int]*halfBucket[T]
}

// halfBucket is one bucket's state and scratch.
type halfBucket[T Float] struct {
	errs []T      // error feedback, nil without
	c    []uint16 // this rank's 16-bit payload, then the sum
}

// NewCompression returns a 16-bit compression hook for one DDP, with
// error feedback or without.
func NewCompression[T Float](format Half, errorFeedback bool) (*Compression[T], error) {
	if format != FP16 && format != BF16 {
		return nil, fmt.Errorf("ddp: unknown 16-bit format %v (want FP16 or BF16)", format)
	}
	return &Compression[T]{format: format, feed: errorFeedback, buckets: map[int]*halfBucket[T]{}}, nil
}

// Reduce is the hook (see Compression).
func (h *Compression[T]) Reduce(ctx context.Context, b *GradBucket[T]) error {
	st, err := h.bucket(b)
	if err != nil {
		return err
	}
	h.round(st, b.buffer, b.group.Size())
	if err := h.sum16(ctx, b.group, st); err != nil {
		return fmt.Errorf("%v compression: %w", h.format, err)
	}
	h.widen(st, b.buffer)
	return nil
}

// round is steps 1 to 3: st.c from buf on size ranks, and the new
// error, in one pass over the bucket: per element y = v/n + e in T, c = y
// rounded (through float32, exact for float64's y only to float32, which
// the 16-bit rounding then rounds again), and e += v/n − c in T.
func (h *Compression[T]) round(st *halfBucket[T], buf []T, size int) {
	n := T(size)
	if h.format == FP16 {
		roundFP16(st.c, st.errs, buf, n)
		return
	}
	roundBF16(st.c, st.errs, buf, n)
}

// The per-format loops are two functions, not one generic over the 16-bit
// type: Float16 and BFloat16 share a generic shape, so a generic loop
// would convert through an indirect call per element.

func roundFP16[T Float](c []uint16, errs, buf []T, n T) {
	c = c[:len(buf)]
	if errs == nil {
		for i, v := range buf {
			c[i] = uint16(numeric.Float16FromFloat32(float32(v / n)))
		}
		return
	}
	errs = errs[:len(buf)]
	for i, v := range buf {
		q := v / n
		x := numeric.Float16FromFloat32(float32(q + errs[i]))
		c[i] = uint16(x)
		errs[i] += q - T(x.Float32())
	}
}

func roundBF16[T Float](c []uint16, errs, buf []T, n T) {
	c = c[:len(buf)]
	if errs == nil {
		for i, v := range buf {
			c[i] = uint16(numeric.BFloat16FromFloat32(float32(v / n)))
		}
		return
	}
	errs = errs[:len(buf)]
	for i, v := range buf {
		q := v / n
		x := numeric.BFloat16FromFloat32(float32(q + errs[i]))
		c[i] = uint16(x)
		errs[i] += q - T(x.Float32())
	}
}

// widen is step 5: buf from the summed st.c.
func (h *Compression[T]) widen(st *halfBucket[T], buf []T) {
	c := st.c[:len(buf)]
	if h.format == FP16 {
		for i, x := range asHalf[numeric.Float16](c) {
			buf[i] = T(x.Float32())
		}
		return
	}
	for i, x := range asHalf[numeric.BFloat16](c) {
		buf[i] = T(x.Float32())
	}
}

// sum16 replaces st.c by its sum over the group: the 16-bit all-reduce.
func (h *Compression[T]) sum16(ctx context.Context, g *allreduce.Group, st *halfBucket[T]) error {
	if h.format == FP16 {
		return allreduce.AllReduce(ctx, g, asHalf[numeric.Float16](st.c), allreduce.Sum)
	}
	return allreduce.AllReduce(ctx, g, asHalf[numeric.BFloat16](st.c), allreduce.Sum)
}

// asHalf views the bits as the 16-bit type H.
func asHalf[H numeric.Float16 | numeric.BFloat16](s []uint16) []H {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*H)(unsafe.Pointer(&s[0])), len(s))
}

func (h *Compression[T]) bucket(b *GradBucket[T]) (*halfBucket[T], error) {
	if st, ok := h.buckets[b.index]; ok {
		if len(st.c) != len(b.buffer) {
			return nil, fmt.Errorf("%v compression: bucket %d has %d elements, %d before", h.format, b.index, len(b.buffer), len(st.c))
		}
		return st, nil
	}
	st := &halfBucket[T]{c: make([]uint16, len(b.buffer))}
	if h.feed {
		st.errs = make([]T, len(b.buffer))
	}
	h.buckets[b.index] = st
	return st, nil
}
