package allreducetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// ShiftSuite checks allreduce.Shift over the transport connect makes,
// against the permutation computed here: for each of ranks and every
// offset, uneven counts with empty buffers among them (and, when large
// is set, buffers of a few hundred KiB, cut into pieces by transports
// with a segment size), float64 payloads of special values (NaN
// payloads, ±Inf, ±0, denormals) compared bit for bit, synchronously and
// as ShiftAsync in flight with a collective issued after it; then a rank
// that shifts by another offset than its peers, and one with a buffer of
// the wrong length, and dst overlapping src (in place), each of which
// must fail every rank, naming the call
// (the offsets, or ErrInvalid on the rank with the wrong buffer).
// Ranks that disagree on the offset wait for messages that never come
// (as MPI_Sendrecv or NCCL's send/recv with mismatched peers do): they
// fail at the context's deadline (here 0.5 s) or the transport's timeout,
// the hang blame naming each rank's call.
func ShiftSuite(t *testing.T, connect func(tb testing.TB, n int) []transport.Conn, ranks []int, large bool) {
	for _, n := range ranks {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			conns := connect(t, n)
			errs := RunRanks(conns, func(g *allreduce.Group) error {
				for _, scale := range shiftScales(large) {
					counts := shiftCounts(n, scale)
					for d := range n {
						if err := checkShift(g, counts, d, (d+scale)%2 == 1); err != nil {
							return fmt.Errorf("counts %v, offset %d: %w", counts, d, err)
						}
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
	t.Run("mismatched-offset", func(t *testing.T) {
		shiftFails(t, connect(t, 3), func(g *allreduce.Group, buf []float64) error {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			return allreduce.Shift(ctx, g, buf, make([]float64, 4), []int{4, 4, 4}, 1+g.Rank()%2)
		}, "by 2")
	})
	t.Run("in-place", func(t *testing.T) {
		shiftFails(t, connect(t, 2), func(g *allreduce.Group, buf []float64) error {
			return allreduce.Shift(context.Background(), g, buf[1:], buf[:3], []int{3, 3}, 1)
		}, "overlap")
	})
	t.Run("wrong-length", func(t *testing.T) {
		shiftFails(t, connect(t, 3), func(g *allreduce.Group, buf []float64) error {
			counts, src := []int{4, 4, 4}, make([]float64, 4)
			if g.Rank() == 2 {
				return allreduce.Shift(context.Background(), g, buf[:3], src, counts, 1)
			}
			return allreduce.Shift(context.Background(), g, buf, src, counts, 1)
		}, "")
	})
}

// shiftScales is the element scales of the counts: small, and with large
// one past 256 KiB of float64 per buffer.
func shiftScales(large bool) []int {
	if large {
		return []int{1, 7, 40_001}
	}
	return []int{1, 7}
}

// shiftCounts is an uneven count per rank at scale s: rank i has
// (i·s + i) mod (2s+1) elements, rank 1 none when there are 3 or more.
func shiftCounts(n, s int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = (i*s + i + s) % (2*s + 1)
	}
	if n >= 3 {
		counts[1] = 0
	}
	return counts
}

// shiftPayload is rank r's buffer of count special values.
func shiftPayload(r, count int) []float64 {
	specials := []float64{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, 5e-324, -2.5e-310,
		math.Float64frombits(0x7ff8_0000_dead_0000 | uint64(r)), math.Float64frombits(0xfff0_0000_0000_0001)}
	out := make([]float64, count)
	for i := range out {
		if i%3 == 0 {
			out[i] = specials[(i/3+r)%len(specials)]
		} else {
			out[i] = float64(r*1_000_003 + i)
		}
	}
	return out
}

// checkShift shifts by d and compares with the left rank's payload; async
// issues it as ShiftAsync followed by a Barrier before waiting.
func checkShift(g *allreduce.Group, counts []int, d int, async bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, r := g.Size(), g.Rank()
	left := ((r-d)%n + n) % n
	src, dst := shiftPayload(r, counts[r]), make([]float64, counts[left])
	for i := range dst {
		dst[i] = math.NaN()
	}
	if async {
		w := allreduce.ShiftAsync(ctx, g, dst, src, counts, d)
		if err := allreduce.Barrier(ctx, g); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
	} else if err := allreduce.Shift(ctx, g, dst, src, counts, d); err != nil {
		return err
	}
	return DiffBits(fmt.Sprintf("rank %d's piece from rank %d", r, left), dst, shiftPayload(left, counts[left]))
}

// shiftFails runs call on every rank of conns (a 4-element buffer each),
// then, on a rank whose call returned nil (its own exchange could
// complete: a buffered transport delivers its send although the peer
// does not receive it), a Barrier: every rank must fail within 10 s, the
// error of at least one containing want (or being ErrInvalid when want
// is empty).
func shiftFails(t *testing.T, conns []transport.Conn, call func(g *allreduce.Group, buf []float64) error, want string) {
	start := time.Now()
	errs := RunRanks(conns, func(g *allreduce.Group) error {
		if err := call(g, make([]float64, 4)); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := allreduce.Barrier(ctx, g); err != nil {
			return fmt.Errorf("the Barrier after a Shift that completed here: %w", err)
		}
		return nil
	})
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %v to fail", el)
	}
	named := false
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: no error", r)
			continue
		}
		t.Logf("rank %d: %v", r, err)
		if (want == "" && errors.Is(err, allreduce.ErrInvalid)) || (want != "" && strings.Contains(err.Error(), want)) {
			named = true
		}
	}
	if !named {
		t.Errorf("no rank's error names the cause (%q)", want)
	}
}
