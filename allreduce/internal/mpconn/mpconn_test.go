package mpconn

import (
	"context"
	"errors"
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
	if err := Gather(context.Background(), 2, est, func(v int) { got = append(got, v) }, nil, nil, nil); err != nil || len(got) != 2 {
		t.Errorf("Gather: %v, %v", err, got)
	}
	fails := make(chan error, 1)
	fails <- errors.New("rank 2 failed")
	if err := Gather(context.Background(), 1, make(chan int), func(int) {}, nil, fails, nil); err == nil || err.Error() != "rank 2 failed" {
		t.Errorf("Gather with a failure: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Gather(ctx, 1, make(chan int), func(int) {}, nil, nil, func() error { return errors.New("timed out") }); err == nil || err.Error() != "timed out" {
		t.Errorf("Gather after ctx: %v", err)
	}
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
