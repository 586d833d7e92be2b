package allreducetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// MissingRank runs a hang on conns, a world whose transport times out
// after timeout: every rank all-reduces count float32 once, then every
// rank but missing calls the second all-reduce (#1) while rank missing
// holds back until the others have failed, then calls it too. It returns
// nil if every other rank failed within timeout plus two seconds with a
// *allreduce.StalledError whose Missing is rank missing and whose text
// names rank missing and the call ("rank 1 never completed #1
// AllReduce"); else what was wrong. Rank missing's own late call is not
// judged: it may fail (its peers aborted) or, where every message it
// needed was sent before its peers gave up, complete.
func MissingRank(conns []transport.Conn, missing, count int, timeout time.Duration, opts ...allreduce.GroupOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	others := make(chan struct{}, len(conns))
	took := make([]time.Duration, len(conns))
	errs := RunRanks(conns, func(g *allreduce.Group) error {
		r := g.Rank()
		buf := make([]float32, count)
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
			return fmt.Errorf("first all-reduce: %w", err)
		}
		if r == missing {
			for range len(conns) - 1 {
				<-others
			}
			return allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
		}
		defer func() { others <- struct{}{} }()
		t0 := time.Now()
		err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
		took[r] = time.Since(t0)
		return err
	}, opts...)
	var problems []string
	want := fmt.Sprintf("rank %d never completed #1 AllReduce", missing)
	for r, err := range errs {
		var se *allreduce.StalledError
		switch {
		case r == missing:
			continue
		case err == nil:
			problems = append(problems, fmt.Sprintf("rank %d: no error", r))
		case !errors.As(err, &se) || se.Missing != missing || !strings.Contains(err.Error(), want):
			problems = append(problems, fmt.Sprintf("rank %d's error does not say %q: %v", r, want, err))
		case !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrPeer):
			problems = append(problems, fmt.Sprintf("rank %d's error is neither a timeout nor a peer's failure: %v", r, err))
		case took[r] > timeout+2*time.Second:
			problems = append(problems, fmt.Sprintf("rank %d failed after %v, want at most %v", r, took[r], timeout+2*time.Second))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
