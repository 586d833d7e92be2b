package mpconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

type testLink struct{ bad error }

func TestCoreLink(t *testing.T) {
	c := NewCore[*testLink]("tcp", 1, 3, 100, time.Second, 8)
	c.Links[0], c.Links[2] = &testLink{}, &testLink{bad: errors.New("broken")}
	c.Usable = func(l *testLink) error { return l.bad }
	ctx := context.Background()
	if l, err := c.SendLink(ctx, 0, 10); err != nil || l != c.Links[0] {
		t.Errorf("SendLink(0) = %v, %v", l, err)
	}
	if l, err := c.RecvLink(ctx, 1, 10); err != nil || l != nil {
		t.Errorf("RecvLink(self) = %v, %v", l, err)
	}
	if _, err := c.SendLink(ctx, 2, 10); err == nil || err.Error() != "broken" {
		t.Errorf("SendLink to a failed link: %v", err)
	}
	for _, peer := range []int{-1, 3} {
		if _, err := c.SendLink(ctx, peer, 0); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("peer %d: %v", peer, err)
		}
	}
	if _, _, err := c.ExchangeLinks(ctx, 0, 10, 1, 101); err == nil || err.Error() != "tcp rank 1: message of 101 bytes: "+transport.ErrInvalid.Error()+" (MaxMessage is 100)" {
		t.Errorf("ExchangeLinks over MaxMessage: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.RecvLink(cctx, 0, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	c.End.Finish(transport.ErrClosed, nil, nil)
	if _, err := c.SendLink(ctx, 0, 1); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	if got := Missing([]*testLink{nil, c.Links[0], nil, nil}, 2); got != "0, 3" {
		t.Errorf("Missing = %q", got)
	}
}

func TestRedial(t *testing.T) {
	tries := 0
	ctxErr, last := Redial(context.Background(), time.Millisecond, func() (bool, bool, error) {
		tries++
		return tries == 3, false, errors.New("refused")
	})
	if ctxErr != nil || last != nil || tries != 3 {
		t.Errorf("Redial until done: %v, %v after %d tries", ctxErr, last, tries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ctxErr, last = Redial(ctx, time.Millisecond, func() (bool, bool, error) { return false, true, errors.New("handshake") })
	if !errors.Is(ctxErr, context.DeadlineExceeded) || last == nil || last.Error() != "handshake" {
		t.Errorf("Redial until ctx ends: %v, %v", ctxErr, last)
	}
}

func TestGather(t *testing.T) {
	est := make(chan int, 3)
	est <- 1
	est <- 2
	var got []int
	if err := Gather(context.Background(), 2, est, func(v int) { got = append(got, v) }, nil, nil, nil, 0, nil); err != nil || len(got) != 2 {
		t.Errorf("Gather: %v, %v", err, got)
	}
	fails := make(chan error, 1)
	fails <- errors.New("rank 2 failed")
	if err := Gather(context.Background(), 1, make(chan int), func(int) {}, nil, fails, nil, 0, nil); err == nil || err.Error() != "rank 2 failed" {
		t.Errorf("Gather with a failure: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Gather(ctx, 1, make(chan int), func(int) {}, nil, nil, func() error { return errors.New("timed out") }, 0, nil); err == nil || err.Error() != "timed out" {
		t.Errorf("Gather after ctx: %v", err)
	}
	// While it waits, it ticks.
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ticks := 0
	_ = Gather(ctx, 1, make(chan int), func(int) {}, nil, nil, func() error { return nil }, 10*time.Millisecond, func() { ticks++ })
	if ticks < 3 || ticks > 11 {
		t.Errorf("Gather ticked %d times in 100 ms every 10 ms", ticks)
	}
}

// TestReporter: the first connection of each (source, cause) is printed at
// once; repeats are summed up at the next progress line; the pairs
// tracked are bounded; a nil Reporter prints nothing.
func TestReporter(t *testing.T) {
	var lines []string
	r := NewReporter("tcp", 0, func(l string) { lines = append(lines, l) }, 5*time.Minute)
	r.TurnedAway("127.0.0.1:53122", "127.0.0.1", "authentication failed (wrong secret?)")
	r.TurnedAway("127.0.0.1:53124", "127.0.0.1", "authentication failed (wrong secret?)")
	r.TurnedAway("127.0.0.1:53126", "127.0.0.1", "authentication failed (wrong secret?)")
	r.TurnedAway("10.0.0.9:1", "10.0.0.9", "not the ringddp protocol")
	want := []string{
		"tcp: rank 0: turned away a connection from 127.0.0.1:53122: authentication failed (wrong secret?)",
		"tcp: rank 0: turned away a connection from 10.0.0.9:1: not the ringddp protocol",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("got %q, want %q", lines, want)
	}
	lines = nil
	r.Waiting("1", "rank 1 has not connected")
	want = []string{
		"tcp: rank 0: still waiting for rank(s) 1 (0 s of 5m0s): rank 1 has not connected",
		"tcp: rank 0: turned away 2 more connection(s) from 127.0.0.1: authentication failed (wrong secret?)",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("got %q, want %q", lines, want)
	}
	lines = nil
	for i := range 3 * maxCauses {
		r.TurnedAway("x", strconv.Itoa(i), "flood")
	}
	if len(lines) != maxCauses-2 {
		t.Errorf("%d lines for %d sources, want %d (bounded)", len(lines), 3*maxCauses, maxCauses-2)
	}
	lines = nil
	r.Waiting("1", "")
	if len(lines) != 2 || !strings.Contains(lines[1], fmt.Sprintf("turned away %d more connection(s) for other causes or from other sources", 2*maxCauses+2)) {
		t.Errorf("got %q", lines)
	}
	var nilr *Reporter
	nilr.TurnedAway("a", "b", "c")
	nilr.Waiting("1", "")
}

func TestCheckJob(t *testing.T) {
	id := ""
	if err := CheckJob("shm", 0, 1, &id, nil, nil, false); err != nil || id != DefaultRunID {
		t.Errorf("one rank: %v, run id %q", err, id)
	}
	if err := CheckJob("shm", 0, 2, &id, nil, nil, true); !errors.Is(err, transport.ErrInvalid) || err.Error() != "shm: "+transport.ErrInvalid.Error()+": no rendezvous store for 2 ranks" {
		t.Errorf("no store: %v", err)
	}
	var tm, ct, ht time.Duration
	var mm int64 = 1 << 41
	if err := DefaultLimits("tcp", &tm, &ct, &ht, &mm, 1<<40); !errors.Is(err, transport.ErrInvalid) || tm != DefaultTimeout || ct != DefaultConnectTimeout || ht != DefaultHandshakeTimeout {
		t.Errorf("DefaultLimits: %v (%v %v %v)", err, tm, ct, ht)
	}
}
