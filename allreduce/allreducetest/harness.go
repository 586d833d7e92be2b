// Package allreducetest is the shared test harness of ringddp's
// collectives, for every transport: the rank runner (RunRanks, over
// package internal/run/rankrun, and StartRanks on top of it for ranks kept
// between jobs), one collective matrix (Matrix), one AllReduce benchmark
// body (BenchAllReduce); the sequential reference and its deterministic
// test data are package internal/run/reference's Reduce and Input.
package allreducetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/rankrun"
)

// RunRanks runs fn once per rank over a Group made over each of conns
// with opts (rankrun.Run): each rank on its own goroutine, under the one
// rank runner's failure policy (package internal/run/rankrun: a rank that fails,
// panics or exits aborts its group, so the others fail at once with its
// cause), and returns every rank's error, by rank. Every group is closed
// when every rank has returned.
func RunRanks(conns []transport.Conn, fn func(g *allreduce.Group) error, opts ...allreduce.GroupOption) []error {
	return rankrun.Run(conns, fn, opts...)
}

// RunGroups is RunRanks over groups the caller made (say with options
// that differ by rank, like allreduce.WithNode) and closes: fn runs once
// per group, on its own goroutine, under RunRanks' failure policy, and
// every rank's error comes back, by rank.
func RunGroups(groups []*allreduce.Group, fn func(g *allreduce.Group) error) []error {
	return rankrun.RunGroups(groups, func(_ int, g *allreduce.Group) error { return fn(g) })
}

// PanicError is the error of a rank that panicked: its value and stack.
type PanicError = rankrun.PanicError

// Ranks are ranks kept running between jobs, for suites that run many
// short collectives on one set of connections (making a world per cell,
// dialling tcp ranks in particular, would cost more than the cells): each
// rank is one RunRanks rank whose function runs the jobs Do hands it, in
// order, on its own group, so the groups live across jobs and a job fails
// under RunRanks' policy. A failed job ends the ranks: Do then reports
// every later job as not run, and the caller starts fresh ones.
type Ranks struct {
	n       int
	jobs    []chan func(g *allreduce.Group) error
	results chan rankResult
	done    chan struct{}
	errs    []error // RunRanks' result, once done is closed
	failed  bool
	closed  bool
}

type rankResult struct {
	rank int
	err  error
}

// errRanksFailed is Do's error once an earlier job failed.
var errRanksFailed = errors.New("not run: an earlier job on these ranks failed, or they were closed")

// StartRanks starts RunRanks over conns (groups made with opts) with ranks
// that wait for jobs. Close them when done.
func StartRanks(conns []transport.Conn, opts ...allreduce.GroupOption) *Ranks {
	n := len(conns)
	rs := &Ranks{
		n:       n,
		jobs:    make([]chan func(g *allreduce.Group) error, n),
		results: make(chan rankResult, n),
		done:    make(chan struct{}),
	}
	for r := range rs.jobs {
		rs.jobs[r] = make(chan func(g *allreduce.Group) error, 1)
	}
	go func() {
		defer close(rs.done)
		rs.errs = RunRanks(conns, func(g *allreduce.Group) error {
			r := g.Rank()
			for job := range rs.jobs[r] {
				if err := rs.runJob(r, g, job); err != nil {
					return err // RunRanks aborts the group
				}
			}
			return nil
		}, opts...)
	}()
	return rs
}

// runJob runs one job on rank r and reports its result, also when the job
// panics (its error is then a *PanicError) or exits by runtime.Goexit (the
// rank then ends, and RunRanks aborts its group).
func (rs *Ranks) runJob(r int, g *allreduce.Group, job func(g *allreduce.Group) error) (err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			err, returned = rankrun.Panicked(r, p), true
		}
		if !returned {
			err = rankrun.Goexited(r)
		}
		rs.results <- rankResult{r, err}
	}()
	err = job(g)
	returned = true
	return err
}

// Do runs fn on every rank (its job) and returns every rank's error, by
// rank, once every rank has finished it. After a job that failed on any
// rank the ranks are done: Failed reports true and later jobs do not run.
func (rs *Ranks) Do(fn func(g *allreduce.Group) error) []error {
	errs := make([]error, rs.n)
	if rs.failed || rs.closed {
		for r := range errs {
			errs[r] = errRanksFailed
		}
		return errs
	}
	for _, ch := range rs.jobs {
		ch <- fn
	}
	got := make([]bool, rs.n)
	for left := rs.n; left > 0; {
		select {
		case res := <-rs.results:
			errs[res.rank], got[res.rank] = res.err, true
			left--
		case <-rs.done:
			// Some rank ended without finishing the job (it panicked or
			// exited, or its group could not be made): every result that
			// was sent is buffered; the others are RunRanks' errors.
			for drained := false; !drained; {
				select {
				case res := <-rs.results:
					errs[res.rank], got[res.rank] = res.err, true
				default:
					drained = true
				}
			}
			for r := range errs {
				if !got[r] {
					errs[r] = rs.errs[r]
					if errs[r] == nil {
						errs[r] = rankrun.Goexited(r)
					}
				}
			}
			left = 0
		}
	}
	for _, err := range errs {
		if err != nil {
			rs.failed = true
		}
	}
	return errs
}

// Failed reports whether a job failed (the ranks are then done).
func (rs *Ranks) Failed() bool { return rs.failed }

// Close ends the ranks once their current job is done, closes their groups
// and returns RunRanks' errors, by rank.
func (rs *Ranks) Close() []error {
	if !rs.closed {
		rs.closed = true
		for _, ch := range rs.jobs {
			close(ch)
		}
	}
	<-rs.done
	return rs.errs
}

// Groups makes a Group over each of conns with opts, for tests that drive
// the groups from the test's own goroutine (a rank that never calls, a
// half-finished collective); tb's cleanup closes them. Tests whose ranks
// each run a function use RunRanks.
func Groups(tb testing.TB, conns []transport.Conn, opts ...allreduce.GroupOption) []*allreduce.Group {
	tb.Helper()
	groups, errs := rankrun.NewGroups(conns, opts...)
	tb.Cleanup(func() { rankrun.Close(groups, conns) })
	if errs != nil {
		tb.Fatal(FirstError(errs))
	}
	return groups
}

// InprocConns makes an in-process world of n ranks with the given timeout
// (and further world options) and returns its endpoints.
func InprocConns(n int, timeout time.Duration, opts ...inproc.Option) ([]transport.Conn, *inproc.World, error) {
	w, err := inproc.NewWorld(n, append([]inproc.Option{inproc.WithTimeout(timeout)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	return w.Endpoints(), w, nil
}

// Inproc is a MatrixConfig.Connect (and a Groups or BenchAllReduce
// source): fresh in-process worlds with the given timeout and options.
func Inproc(timeout time.Duration, opts ...inproc.Option) func(tb testing.TB, n int) []transport.Conn {
	return func(tb testing.TB, n int) []transport.Conn {
		tb.Helper()
		conns, _, err := InprocConns(n, timeout, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		return conns
	}
}

// RunInproc is RunRanks over a fresh in-process world of n ranks.
func RunInproc(n int, timeout time.Duration, fn func(g *allreduce.Group) error, opts ...allreduce.GroupOption) []error {
	conns, _, err := InprocConns(n, timeout)
	if err != nil {
		return []error{err}
	}
	return RunRanks(conns, fn, opts...)
}

// Conns converts a transport's concrete endpoints (a []*tcp.Conn) to the
// []transport.Conn that RunRanks takes.
func Conns[C transport.Conn](cs []C) []transport.Conn {
	out := make([]transport.Conn, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// FirstError returns the first non-nil error with its rank.
func FirstError(errs []error) error {
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// RequireNoErrors fails tb with every rank's error, if any.
func RequireNoErrors(tb testing.TB, errs []error) {
	tb.Helper()
	failed := false
	for r, err := range errs {
		if err != nil {
			tb.Errorf("rank %d: %v", r, err)
			failed = true
		}
	}
	if failed {
		tb.FailNow()
	}
}

// Ctx returns a context bounded by d, for tests.
func Ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// AlgorithmsFor lists the AllReduce algorithms a group over conn can run
// (allreduce.Algorithms less those whose requirements conn does not meet),
// for tests that range over every algorithm of a transport.
func AlgorithmsFor(conn transport.Conn, opts ...allreduce.GroupOption) []allreduce.Algorithm {
	var out []allreduce.Algorithm
	for _, a := range allreduce.Algorithms() {
		if _, err := allreduce.NewGroup(conn, append(opts[:len(opts):len(opts)], allreduce.WithAlgorithm(a))...); err == nil {
			out = append(out, a)
		}
	}
	return out
}
