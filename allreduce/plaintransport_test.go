package allreduce_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// plainConn hides every optional capability of the conn it wraps, so the
// Group uses its fallbacks: Send on a second goroutine instead of
// Exchange, Ring instead of Direct, no Abort.
type plainConn struct{ c transport.Conn }

func (p plainConn) Rank() int { return p.c.Rank() }
func (p plainConn) Size() int { return p.c.Size() }
func (p plainConn) Send(ctx context.Context, to int, h transport.Header, b []byte) error {
	return p.c.Send(ctx, to, h, b)
}
func (p plainConn) Recv(ctx context.Context, from int, h transport.Header, n int, s transport.Sink) error {
	return p.c.Recv(ctx, from, h, n, s)
}
func (p plainConn) Close() error { return p.c.Close() }

func plainConns(t *testing.T, n int, timeout time.Duration) []transport.Conn {
	t.Helper()
	conns := allreducetest.Inproc(timeout)(t, n)
	for r := range conns {
		conns[r] = plainConn{conns[r]}
	}
	return conns
}

// TestPlainTransport runs a batch of every collective over a transport
// with only the required methods.
func TestPlainTransport(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := allreducetest.RunRanks(plainConns(t, n, 10*time.Second), func(g *allreduce.Group) error {
				if g.Algorithm() != allreduce.Ring {
					return fmt.Errorf("algorithm %v over a plain transport, want ring", g.Algorithm())
				}
				var works []*allreduce.Work
				var ops []inflight
				for i := range 30 {
					op := batchOp(i, g.Rank(), n)
					if i%3 == 0 {
						if err := op.sync(ctx, g); err != nil {
							return fmt.Errorf("%s: %w", op.name, err)
						}
						if err := op.check(); err != nil {
							return fmt.Errorf("%s: %w", op.name, err)
						}
						continue
					}
					works = append(works, op.start(ctx, g))
					ops = append(ops, op)
				}
				for i, w := range works {
					if err := w.Wait(ctx); err != nil {
						return fmt.Errorf("%s: %w", ops[i].name, err)
					}
					if err := ops[i].check(); err != nil {
						return fmt.Errorf("%s: %w", ops[i].name, err)
					}
				}
				return nil
			})
			allreducetest.RequireNoErrors(t, errs)
		})
	}
	// Direct needs shared memory.
	_, err := allreduce.NewGroup(plainConns(t, 2, time.Second)[0], allreduce.WithAlgorithm(allreduce.Direct))
	require.ErrorIs(t, err, allreduce.ErrInvalid)
}

// TestPlainTransportFailure: without Abort, a failure still ends every
// rank (by a peer error or the timeout).
func TestPlainTransportFailure(t *testing.T) {
	const timeout = time.Second
	start := time.Now()
	errs := allreducetest.RunRanks(plainConns(t, 3, timeout), func(g *allreduce.Group) error {
		if g.Rank() == 2 {
			return allreduce.Broadcast(context.Background(), g, make([]float32, 8), 0)
		}
		return allreduce.AllReduce(context.Background(), g, make([]float32, 8), allreduce.Sum)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
	require.Less(t, time.Since(start), 5*time.Second)
}
