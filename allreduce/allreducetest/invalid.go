package allreducetest

// Invalid cells (Avg of an integer type): every rank's call must fail with
// ErrInvalid, in the sync form and the async one.

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
)

// runInvalid checks that cell c (Avg on an integer type) is an ErrInvalid
// error on every rank, in the sync form and, on fresh ranks, the async
// one: the error poisons the group.
func (m *matrix) runInvalid(t *testing.T, c cell, opts []allreduce.GroupOption) {
	switch c.dt {
	case allreduce.Int32:
		invalidCell[int32](t, m, c, opts)
	default:
		invalidCell[int64](t, m, c, opts)
	}
}

func invalidCell[T allreduce.Numeric](t *testing.T, m *matrix, c cell, opts []allreduce.GroupOption) {
	root := 0
	if len(c.roots) > 0 {
		root = c.roots[len(c.roots)-1]
	}
	forms := []bool{false, true} // async
	if m.cfg.SyncOnly {
		forms = forms[:1]
	}
	for _, async := range forms {
		errs := RunRanks(m.cfg.Connect(t, c.n), func(g *allreduce.Group) error {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
			defer cancel()
			buf := make([]T, c.length)
			var sync func() error
			var start func() *allreduce.Work
			switch c.coll {
			case allreduce.KindAllReduce:
				sync = func() error { return allreduce.AllReduce(ctx, g, buf, c.op) }
				start = func() *allreduce.Work { return allreduce.AllReduceAsync(ctx, g, buf, c.op) }
			case allreduce.KindReduceScatter:
				lo, hi := allreduce.ChunkBounds(c.length, c.n, g.Rank())
				dst := make([]T, hi-lo)
				sync = func() error { return allreduce.ReduceScatter(ctx, g, dst, buf, c.op) }
				start = func() *allreduce.Work { return allreduce.ReduceScatterAsync(ctx, g, dst, buf, c.op) }
			case allreduce.KindReduce:
				sync = func() error { return allreduce.Reduce(ctx, g, buf, c.op, root) }
				start = func() *allreduce.Work { return allreduce.ReduceAsync(ctx, g, buf, c.op, root) }
			default:
				return fmt.Errorf("no invalid cells of %v", c.coll)
			}
			return callMode(ctx, c.coll.String(), async, sync, start)
		}, opts...)
		for r, err := range errs {
			if !errors.Is(err, allreduce.ErrInvalid) {
				t.Errorf("async=%v rank %d: %v on %v: got %v, want an error wrapping ErrInvalid", async, r, c.op, c.dt, err)
			}
		}
	}
}
