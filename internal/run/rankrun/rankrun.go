// Package rankrun is the one rank runner: it runs the ranks of a job that
// one process holds, each on its own goroutine, for the test harness
// (allreducetest), the trainer and cmd/bench. It does not import package
// testing, so commands may use it.
//
// Its failure policy: a rank whose function returns an error, panics or
// exits without returning (runtime.Goexit: t.FailNow on a rank's
// goroutine) aborts its group with that error (Group.Abort; on a transport
// without transport.Aborter it closes its connection, as a dead process's
// would be), so the other ranks fail at once with that cause instead of
// waiting for their timeout. Every error counts, a context's cancellation
// included. A panic is the rank's error (*PanicError, with its stack); the
// cause its peers get leaves the stack out. Every rank's error comes back,
// by rank, and Err picks the one that names the rank whose failure the
// others' are consequences of.
package rankrun

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Run makes a Group over each of conns with opts, runs fn once per rank
// under the failure policy and returns every rank's error, by rank. If
// any rank's NewGroup fails no fn runs: that rank's error is the NewGroup
// error and every other rank's says it was not run. Every group is closed
// (and with it every connection) when every rank has returned.
func Run(conns []transport.Conn, fn func(g *allreduce.Group) error, opts ...allreduce.GroupOption) []error {
	groups, errs := NewGroups(conns, opts...)
	defer Close(groups, conns)
	if errs != nil {
		return errs
	}
	return RunGroups(groups, func(_ int, g *allreduce.Group) error { return fn(g) })
}

// NewGroups makes a Group over each of conns with opts. If any fails, errs
// holds that rank's error and, for every other rank, one saying it was not
// run; the groups that were made are returned all the same, for the
// caller to close with the connections that have none (Close). errs is nil when
// every group was made.
func NewGroups(conns []transport.Conn, opts ...allreduce.GroupOption) (groups []*allreduce.Group, errs []error) {
	groups = make([]*allreduce.Group, len(conns))
	made := make([]error, len(conns))
	first := -1
	for r, c := range conns {
		groups[r], made[r] = allreduce.NewGroup(c, opts...)
		if made[r] != nil && first < 0 {
			first = r
		}
	}
	if first < 0 {
		return groups, nil
	}
	for r := range made {
		if made[r] == nil {
			made[r] = fmt.Errorf("not run: rank %d could not make its group: %w", first, made[first])
		}
	}
	return groups, made
}

// Close closes every group of NewGroups, or its connection where it made
// none.
func Close(groups []*allreduce.Group, conns []transport.Conn) {
	for r, g := range groups {
		if g != nil {
			_ = g.Close()
		} else {
			_ = conns[r].Close()
		}
	}
}

// RunGroups runs fn(i, groups[i]) for every i, each on its own goroutine,
// under the failure policy, and returns every rank's error, by index. The
// caller made the groups (say with options that differ by rank) and
// closes them.
func RunGroups(groups []*allreduce.Group, fn func(i int, g *allreduce.Group) error) []error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runRank(i, g, fn, &errs[i])
		}()
	}
	wg.Wait()
	return errs
}

// runRank runs fn on group i under the failure policy and stores its
// error in *out (set even when fn exits by runtime.Goexit).
func runRank(i int, g *allreduce.Group, fn func(i int, g *allreduce.Group) error, out *error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			*out = Panicked(g.Rank(), p)
		} else if !returned {
			*out = Goexited(g.Rank())
		}
		if *out != nil {
			fail(g, *out)
		}
	}()
	*out = fn(i, g)
	returned = true
}

// PanicError is the error of a rank that panicked: its value and stack.
type PanicError struct {
	Rank  int
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("rank %d panicked: %v\n%s", e.Rank, e.Value, e.Stack)
}

// Panicked is rank's panic p as an error; call it in the deferred function
// that recovered p, so that the stack still holds the panicking frames.
func Panicked(rank int, p any) error { return &PanicError{Rank: rank, Value: p, Stack: debug.Stack()} }

// Goexited is the error of a rank that exited without returning.
func Goexited(rank int) error {
	return fmt.Errorf("rank %d exited without returning (runtime.Goexit: t.FailNow, t.Fatal or t.Skip on a rank's goroutine)", rank)
}

// fail aborts g with err so that its peers fail at once. The cause they
// get leaves out a panic's stack.
func fail(g *allreduce.Group, err error) {
	cause := err
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		cause = fmt.Errorf("rank %d panicked: %v", pe.Rank, pe.Value)
	}
	g.Abort(cause)
	if _, ok := g.Conn().(transport.Aborter); !ok {
		_ = g.Conn().Close()
	}
}

// Err is the error to report for a run whose errs[i] is the error of
// groups[i]: the first that is not merely a consequence of another rank's
// failure (allreduce.ErrGroupFailed, transport.ErrPeer), or else the
// first, prefixed with its rank; nil if every rank succeeded.
func Err(groups []*allreduce.Group, errs []error) error {
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		err = fmt.Errorf("rank %d: %w", groups[i].Rank(), err)
		if first == nil {
			first = err
		}
		if !errors.Is(err, allreduce.ErrGroupFailed) && !errors.Is(err, transport.ErrPeer) {
			return err
		}
	}
	return first
}
