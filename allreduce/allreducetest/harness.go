// Package allreducetest is the shared test harness of ringddp's
// collectives: run N ranks on any transport, compute reference results by
// sequential reduction, and make deterministic test data.
package allreducetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// RunRanks runs fn once per rank, each on its own goroutine with a Group over
// conns[rank] made with opts, and returns every rank's error (by rank). A rank that panics
// reports the panic as its error and its connection is closed, as a dead
// process's would be. Groups are closed when every rank has returned.
func RunRanks(conns []transport.Conn, fn func(g *allreduce.Group) error, opts ...allreduce.GroupOption) []error {
	errs := make([]error, len(conns))
	groups := make([]*allreduce.Group, len(conns))
	var wg sync.WaitGroup
	for r, c := range conns {
		g, err := allreduce.NewGroup(c, opts...)
		if err != nil {
			errs[r] = err
			continue
		}
		groups[r] = g
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
					_ = c.Close()
				}
			}()
			errs[r] = fn(g)
		}()
	}
	wg.Wait()
	for _, g := range groups {
		if g != nil {
			_ = g.Close()
		}
	}
	return errs
}

// InprocConns makes an in-process world of n ranks with the given timeout
// and returns its endpoints.
func InprocConns(n int, timeout time.Duration) ([]transport.Conn, *inproc.World, error) {
	w, err := inproc.NewWorld(n, inproc.WithTimeout(timeout))
	if err != nil {
		return nil, nil, err
	}
	conns := make([]transport.Conn, n)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	return conns, w, nil
}

// RunInproc is RunRanks over a fresh in-process world of n ranks.
func RunInproc(n int, timeout time.Duration, fn func(g *allreduce.Group) error, opts ...allreduce.GroupOption) []error {
	conns, _, err := InprocConns(n, timeout)
	if err != nil {
		return []error{err}
	}
	return RunRanks(conns, fn, opts...)
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
		if _, err := allreduce.NewGroup(conn, append(opts, allreduce.WithAlgorithm(a))...); err == nil {
			out = append(out, a)
		}
	}
	return out
}
