package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// wait says how a rank waits for the other while the job forms, and what
// it reports meanwhile.
type wait struct {
	timeout time.Duration // the whole wait (-connect-timeout)
	every   time.Duration // "still waiting" once this often
	grace   time.Duration // rank 0: how long after a failed authentication it gives up
	errOut  io.Writer     // where the reports go
}

// connectStore is rendezvous.Connect, saying every w.every, on a rank
// other than 0, why it still waits for rank 0's store (connection
// refused: rank 0 is not up yet, or listens elsewhere). A store that
// refuses the secret is an error at once.
func connectStore(ctx context.Context, env rendezvous.Env, cfg rendezvous.StoreConfig, w wait) (*rendezvous.TCPStore, error) {
	if env.Rank == 0 {
		return rendezvous.Connect(ctx, env, "", cfg)
	}
	start := time.Now()
	deadline := start.Add(w.timeout)
	for {
		round := time.Now().Add(w.every)
		if round.After(deadline) {
			round = deadline
		}
		c, cancel := context.WithDeadline(ctx, round)
		store, err := rendezvous.Connect(c, env, "", cfg)
		cancel()
		if err == nil || !errors.Is(err, rendezvous.ErrTimeout) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return store, err
		}
		fmt.Fprintf(w.errOut, "rank %d: still waiting for rank 0's store at %s (%v of at most %v): %v\n",
			env.Rank, env.MasterHostPort(), time.Since(start).Round(time.Second), w.timeout, err)
	}
}

// watchFormation runs on rank 0 while the job forms, until ctx ends: it
// prints the connections its store turns away as they happen (from
// where, why) and, every w.every, that it still waits for the other rank.
// A connection that failed authentication (a rank given another secret)
// ends the formation w.grace later, through fail.
func watchFormation(ctx context.Context, srv *rendezvous.StoreServer, w wait, fail context.CancelCauseFunc) {
	start := time.Now()
	last := start
	var seen rendezvous.TurnedAway
	var rejectedAt time.Time
	tick := time.NewTicker(min(time.Second, w.every))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t := srv.TurnedAway()
			if t.Total() > seen.Total() {
				fmt.Fprintf(w.errOut, "rank 0: %s\n", t)
			}
			seen = t
			if t.Rejected > 0 && rejectedAt.IsZero() {
				rejectedAt = now
			}
			if !rejectedAt.IsZero() && now.Sub(rejectedAt) >= w.grace {
				fail(fmt.Errorf("the other rank did not join, and %s: was it given another RINGDDP_SECRET? (both need the same)", t))
				return
			}
			if now.Sub(last) >= w.every {
				last = now
				fmt.Fprintf(w.errOut, "rank 0: still waiting for the other rank (%v of at most %v)\n", now.Sub(start).Round(time.Second), w.timeout)
			}
		}
	}
}
