package allreduce_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/numeric"
)

// Tests of HalvingDoubling (hd.go): its AllReduce matrix, and its two
// halves on their own as ReduceScatter and AllGather.

// TestHalvingDoublingMatrix is the AllReduce matrix of HalvingDoubling on
// the rank counts of 1..17 and 32 that TestMatrix leaves out or runs with
// one op and dtype per length (6, 9..12, 14, 15, 17 and 32), each with
// every length, op and dtype, and the huge cell (2^20+3 elements) on 6
// ranks, synchronously; TestMatrix runs the other rank counts in full, the
// async and repeated calls, and a huge cell on 5. HalvingDoubling has no
// segment size to shrink.
func TestHalvingDoublingMatrix(t *testing.T) {
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect:     allreducetest.Inproc(20 * time.Second),
		Collectives: []allreduce.Kind{allreduce.KindAllReduce},
		Algorithms:  []allreduce.Algorithm{allreduce.HalvingDoubling},
		Ranks: slices.DeleteFunc(slices.Clone(algoRanks), func(n int) bool {
			return slices.Contains(allreducetest.DefaultRanks, n)
		}),
		FullRanks: 32,
		SyncOnly:  true,
		Huge: func(_ allreduce.Kind, _ allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
			if n != 6 || testing.Short() {
				return nil, nil
			}
			return []allreduce.ReduceOp{allreduce.Sum}, []allreduce.DType{allreduce.Float32}
		},
	})
}

// TestHalvingDoublingHalves runs the stand-alone halving reduce-scatter
// and doubling all-gather (ChunkBounds layout, with the fold for
// non-powers of two) against the reference: every rank's chunk of the
// reduction, src left unchanged, and every rank's chunk gathered bit for
// bit on every rank.
func TestHalvingDoublingHalves(t *testing.T) {
	for _, n := range algoRanks {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			var cells []arCell
			for _, c := range allReduceCells(n) {
				if c.op == allreduce.Sum || c.op == allreduce.Avg || c.op == allreduce.Max || c.dt == allreduce.Int64 {
					cells = append(cells, c)
				}
			}
			wants := map[arCell][]byte{}
			// Each cell is two calls: a reduce-scatter (sequence number
			// 2i) and an all-gather of its inputs' chunks (2i+1). A rank's
			// outcome is its reduced chunk followed by the gathered buffer.
			seqs := make([]uint64, n) // per rank: each rank's goroutine touches its own
			run := func(ctx context.Context, g *allreduce.Group, c arCell) ([]byte, error) {
				s := seqs[g.Rank()]
				seqs[g.Rank()] = s + 2
				return byDType(c,
					func() ([]byte, error) { return hdHalvesCell[float32](ctx, g, s, c) },
					func() ([]byte, error) { return hdHalvesCell[float64](ctx, g, s, c) },
					func() ([]byte, error) { return hdHalvesCell[int32](ctx, g, s, c) },
					func() ([]byte, error) { return hdHalvesCell[int64](ctx, g, s, c) })
			}
			want := func(c arCell, r int) []byte {
				if wants[c] == nil {
					wants[c] = allReduceWant(c, n)
				}
				es := c.dt.Size()
				lo, hi := allreduce.ChunkBounds(c.length, n, r)
				gathered, _ := byDType(c,
					func() ([]byte, error) { return allreducetest.Bytes(cellInput[float32](c, 0)), nil },
					func() ([]byte, error) { return allreducetest.Bytes(cellInput[float64](c, 0)), nil },
					func() ([]byte, error) { return allreducetest.Bytes(cellInput[int32](c, 0)), nil },
					func() ([]byte, error) { return allreducetest.Bytes(cellInput[int64](c, 0)), nil })
				return append(slices.Clone(wants[c][lo*es:hi*es]), gathered...)
			}
			checkCells(t, inprocWorld, n, thinCells(n, cells), run, want)
		})
	}
}

// hdHalvesCell reduce-scatters this rank's input of c, checks the input is
// unchanged, then all-gathers the chunks of rank 0's input (each rank
// contributing its chunk) and returns the reduced chunk and the gathered
// buffer, concatenated.
func hdHalvesCell[T numeric.Arith](ctx context.Context, g *allreduce.Group, seq uint64, c arCell) ([]byte, error) {
	r, n := g.Rank(), g.Size()
	src := cellInput[T](c, r)
	orig := slices.Clone(src)
	lo, hi := allreduce.ChunkBounds(c.length, n, r)
	dst := make([]T, hi-lo)
	if err := allreduce.HDReduceScatter(ctx, g, seq, dst, src, c.op); err != nil {
		return nil, err
	}
	if !slices.Equal(allreducetest.Bytes(src), allreducetest.Bytes(orig)) {
		return nil, fmt.Errorf("reduce-scatter changed its source")
	}
	global := cellInput[T](c, 0)
	gathered := make([]T, c.length)
	if err := allreduce.HDAllGather(ctx, g, seq+1, gathered, slices.Clone(global[lo:hi])); err != nil {
		return nil, err
	}
	return append(slices.Clone(allreducetest.Bytes(dst)), allreducetest.Bytes(gathered)...), nil
}
