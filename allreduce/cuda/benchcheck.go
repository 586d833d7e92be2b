package cuda

import (
	"context"
	"sync"

	"github.com/ringddp/ringddp/allreduce"
)

// The bench's check (BenchConfig.Check): an AllReduce of inputs whose
// reduction is exact in any order (small integers; ±1 for Prod), against
// a sequential host fold of the same inputs (allreduce.Combine rank after
// rank, then Avg's one division), element by element, bitwise.

// benchCheck loads the inputs into every rank's buffer (built on every
// core, uploaded on the rank's own stream), runs the AllReduce once and
// counts the elements that differ from the host fold on any rank.
func benchCheck(ctx context.Context, w *World, bufs []*Buffer, cfg BenchConfig, count int) (int, error) {
	n, es := w.Size(), cfg.DType.Size()
	inputs := make([][]byte, n)
	var wg sync.WaitGroup
	for r := range inputs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inputs[r] = benchInput(cfg.DType, r, count, cfg.Redop)
		}()
	}
	wg.Wait()
	want, err := benchReference(cfg.DType, inputs, cfg.Redop)
	if err != nil {
		return 0, err
	}
	got := make([][]byte, n)
	if err := runAll(w, func(c *Comm) error {
		s := bufs[c.Rank()].Slice(cfg.DType, 0, count)
		if err := c.Upload(ctx, s, inputs[c.Rank()]); err != nil {
			return err
		}
		if err := c.AllReduce(ctx, s, cfg.Redop); err != nil {
			return err
		}
		got[c.Rank()] = make([]byte, count*es)
		return c.Download(ctx, got[c.Rank()], s)
	}); err != nil {
		return 0, err
	}
	wrong := 0
	for r := range got {
		for i := 0; i < count; i++ {
			if string(got[r][i*es:(i+1)*es]) != string(want[i*es:(i+1)*es]) {
				wrong++
			}
		}
	}
	return wrong, nil
}

// benchInput is rank's input: element i a small integer in [-8, 7] from
// a multiplicative hash of (rank, i), ±1 for Prod.
func benchInput(dt allreduce.DType, rank, n int, op allreduce.ReduceOp) []byte {
	out := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		h := (uint32(i)*2654435761 + uint32(rank+1)*40503) >> 28
		v := int64(h) - 8
		if op == allreduce.Prod {
			v = 1 - 2*int64(h&1)
		}
		switch dt {
		case allreduce.Float32:
			elemsOf[float32](out)[i] = float32(v)
		case allreduce.Float64:
			elemsOf[float64](out)[i] = float64(v)
		case allreduce.Int32:
			elemsOf[int32](out)[i] = int32(v)
		default:
			elemsOf[int64](out)[i] = v
		}
	}
	return out
}

// benchReference folds the inputs rank after rank with the host kernel.
func benchReference(dt allreduce.DType, in [][]byte, op allreduce.ReduceOp) ([]byte, error) {
	out := append([]byte(nil), in[0]...)
	hop := op
	if op == allreduce.Avg {
		hop = allreduce.Sum
	}
	for _, b := range in[1:] {
		if err := allreduce.Combine(dt, hop, out, out, b); err != nil {
			return nil, err
		}
	}
	if op == allreduce.Avg {
		divideBytes(dt, out, len(in))
	}
	return out, nil
}
