package allreduce_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// TestMatrixInPieces runs the collective matrix with every message cut
// into pieces of at most 20 bytes (Model.Segment): not a whole number of
// elements of any type, shorter than the chunks of every length but 0 and
// 1, so pieces of one and of several elements, sends and receives cut
// into different counts (uneven ring chunks) and pieces that only send or
// only receive all occur; every algorithm, bitwise against the sequential
// reference on every rank. With the chains forced and Tree's and the
// chains' segments (48 and 64 bytes) larger than the pieces, a message
// one rank sends alone is received inside its peer's exchange (the chain's
// root and its second rank; Tree's leaves and interior ranks): both must
// cut it the same.
func TestMatrixInPieces(t *testing.T) {
	m := cost.DefaultModel(true)
	m.Segment = 20
	for _, tc := range []struct {
		name string
		opts []allreduce.GroupOption
	}{
		{"default", []allreduce.GroupOption{allreduce.WithModel(m)}},
		{"chains", []allreduce.GroupOption{allreduce.WithModel(m), allreduce.WithTuning(allreduce.Tuning{TreeSegment: 48, ChainSegment: 64, ChainMin: 1})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allreducetest.Matrix(t, allreducetest.MatrixConfig{
				Connect: allreducetest.Inproc(20*time.Second, inproc.WithLocalSize(testMatrixLocalSize)),
				Ranks:   []int{1, 2, 3, 4, 7},
				Options: tc.opts,
			})
		})
	}
}

// TestSegmentValidated: a negative segment is refused when the group is
// made.
func TestSegmentValidated(t *testing.T) {
	m := cost.DefaultModel(true)
	m.Segment = -1
	conns, _, err := allreducetest.InprocConns(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allreduce.NewGroup(conns[0], allreduce.WithModel(m)); err == nil {
		t.Fatal("NewGroup accepted a model with segment_bytes -1")
	}
}

// TestVariableChunksInPieces: ReduceScatterV and AllGatherV with uneven
// counts, empty chunks among them, and 12-byte pieces (3 float32s; the
// float64 chunks cut into pieces of one element), so that one exchange
// sends nothing or one piece while it receives many: bitwise against a
// sequential reference on every rank, for every algorithm the group runs
// them with (the ring; Auto).
func TestVariableChunksInPieces(t *testing.T) {
	m := cost.DefaultModel(true)
	m.Segment = 12
	counts := []int{0, 7, 1, 13, 0}
	n, total := len(counts), 0
	for _, c := range counts {
		total += c
	}
	input := func(r, i int) float64 { return float64((r*131+i*17)%29) - 14.5 + float64(r)/8 }
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		ctx := context.Background()
		r := g.Rank()
		src := make([]float64, total)
		for i := range src {
			src[i] = input(r, i)
		}
		off := 0
		for q := range r {
			off += counts[q]
		}
		dst := make([]float64, counts[r])
		if err := allreduce.ReduceScatterV(ctx, g, dst, src, counts, allreduce.Sum); err != nil {
			return err
		}
		for i := range dst {
			want := 0.0
			for q := range n {
				want += input(q, off+i)
			}
			if math.Float64bits(dst[i]) != math.Float64bits(want) {
				return fmt.Errorf("rank %d: ReduceScatterV element %d = %v, want %v", r, i, dst[i], want)
			}
		}
		gathered := make([]float64, total)
		mine := make([]float32, counts[r])
		for i := range mine {
			mine[i] = float32(input(r, i))
		}
		all := make([]float32, total)
		if err := allreduce.AllGatherV(ctx, g, all, mine, counts); err != nil {
			return err
		}
		at := 0
		for q := range n {
			for i := range counts[q] {
				gathered[at] = float64(float32(input(q, i)))
				at++
			}
		}
		for i := range all {
			if float64(all[i]) != gathered[i] {
				return fmt.Errorf("rank %d: AllGatherV element %d = %v, want %v", r, i, all[i], gathered[i])
			}
		}
		return nil
	}, allreduce.WithModel(m))
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
