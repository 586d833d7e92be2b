package allreducetest_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The runner's failure policy: whatever way a rank fails, the others, blocked
// in a collective, fail at once with its cause, long before the transport's
// timeout.

const long = 20 * time.Second // transport timeout no case may wait out

func TestRunRanksFailurePolicy(t *testing.T) {
	cases := []struct {
		name  string
		fail  func(g *allreduce.Group) error // what rank 1 does
		check func(t *testing.T, err error)  // rank 1's error
	}{
		{"error", func(*allreduce.Group) error { return errors.New("wrong-result") },
			func(t *testing.T, err error) { require.EqualError(t, err, "wrong-result") }},
		{"panic", func(*allreduce.Group) error { panic("exploded") },
			func(t *testing.T, err error) {
				var pe *allreducetest.PanicError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, 1, pe.Rank)
				require.Contains(t, err.Error(), "rank 1 panicked: exploded")
				require.Contains(t, err.Error(), "harness_test.go", "the stack")
			}},
		{"goexit", func(*allreduce.Group) error { runtime.Goexit(); return nil },
			func(t *testing.T, err error) { require.ErrorContains(t, err, "rank 1 exited without returning") }},
	}
	for _, c := range cases {
		for _, plain := range []bool{false, true} {
			name := c.name
			if plain {
				name += "/no-Aborter"
			}
			t.Run(name, func(t *testing.T) {
				conns := allreducetest.Inproc(long)(t, 3)
				if plain {
					for r := range conns {
						conns[r] = plainConn{conns[r]}
					}
				}
				start := time.Now()
				errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
					if g.Rank() == 1 {
						return c.fail(g)
					}
					return allreduce.AllReduce(context.Background(), g, make([]float32, 1000), allreduce.Sum)
				})
				require.Less(t, time.Since(start), long/4, "the others must fail fast")
				c.check(t, errs[1])
				for _, r := range []int{0, 2} {
					require.Error(t, errs[r], "rank %d", r)
					if !plain {
						require.ErrorIs(t, errs[r], transport.ErrPeer, "rank %d", r)
						// The cause travels, without a panic's stack.
						cause := strings.SplitN(errs[1].Error(), "\n", 2)[0]
						require.Contains(t, errs[r].Error(), cause, "rank %d", r)
						require.NotContains(t, errs[r].Error(), "goroutine ", "rank %d", r)
					}
				}
			})
		}
	}
}

func TestRunRanksNewGroupFails(t *testing.T) {
	ran := false
	errs := allreducetest.RunRanks(allreducetest.Inproc(long)(t, 2), func(*allreduce.Group) error {
		ran = true
		return nil
	}, allreduce.WithAlgorithm(allreduce.Algorithm(200)))
	require.False(t, ran, "no rank may run when a group could not be made")
	for r, err := range errs {
		require.ErrorIs(t, err, allreduce.ErrInvalid, "rank %d", r)
	}
}

func TestRunRanksClosesGroups(t *testing.T) {
	var groups [2]*allreduce.Group
	errs := allreducetest.RunRanks(allreducetest.Inproc(long)(t, 2), func(g *allreduce.Group) error {
		groups[g.Rank()] = g
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	for r, g := range groups {
		err := allreduce.Barrier(context.Background(), g)
		require.ErrorIs(t, err, transport.ErrClosed, "rank %d", r)
	}
}

func TestRanks(t *testing.T) {
	rs := allreducetest.StartRanks(allreducetest.Inproc(long)(t, 3))
	defer rs.Close()
	var groups [3]*allreduce.Group
	for i := range 3 {
		errs := rs.Do(func(g *allreduce.Group) error {
			if groups[g.Rank()] == nil {
				groups[g.Rank()] = g
			} else if groups[g.Rank()] != g {
				return errors.New("a new group between jobs")
			}
			buf := []int64{int64(g.Rank())}
			if err := allreduce.AllReduce(context.Background(), g, buf, allreduce.Sum); err != nil {
				return err
			}
			if buf[0] != 3 {
				return errors.New("wrong sum")
			}
			return nil
		})
		require.NoError(t, allreducetest.FirstError(errs), "job %d", i)
	}
	require.False(t, rs.Failed())

	// A job that panics on one rank fails every rank at once, and ends the
	// ranks.
	start := time.Now()
	errs := rs.Do(func(g *allreduce.Group) error {
		if g.Rank() == 2 {
			panic("exploded")
		}
		return allreduce.Barrier(context.Background(), g)
	})
	require.Less(t, time.Since(start), long/4)
	require.ErrorContains(t, errs[2], "rank 2 panicked: exploded")
	require.ErrorIs(t, errs[0], transport.ErrPeer)
	require.ErrorIs(t, errs[1], transport.ErrPeer)
	require.True(t, rs.Failed())
	for r, err := range rs.Do(func(*allreduce.Group) error { return nil }) {
		require.ErrorContains(t, err, "not run", "rank %d", r)
	}
	closeErrs := rs.Close()
	require.ErrorContains(t, closeErrs[2], "exploded")
}

// plainConn hides every optional capability (Abort among them).
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
