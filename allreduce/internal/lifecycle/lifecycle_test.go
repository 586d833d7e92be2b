package lifecycle

import (
	"errors"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

func TestEnd(t *testing.T) {
	e := New("tcp", 3)
	if e.Ended() {
		t.Fatal("ended at birth")
	}
	var order []string
	e.Finish(errors.New("boom"), func() {
		if e.Ended() {
			t.Error("ended before before ran")
		}
		order = append(order, "before")
	}, func() {
		select {
		case <-e.Dead():
		default:
			t.Error("Dead open when after runs")
		}
		order = append(order, "after")
	})
	e.Finish(transport.ErrClosed, func() { order = append(order, "again") }, nil)
	if len(order) != 2 || !e.Ended() {
		t.Fatalf("ran %v, ended %v", order, e.Ended())
	}
	if got := e.Err().Error(); got != "tcp rank 3 aborted: boom" {
		t.Errorf("Err() = %q", got)
	}
	c := New("sim", 1)
	c.Finish(transport.ErrClosed, nil, nil)
	if err := c.Err(); !errors.Is(err, transport.ErrClosed) || err.Error() != "sim rank 1: "+transport.ErrClosed.Error() {
		t.Errorf("Err() after Close = %v", err)
	}
	cause := errors.New("mismatch")
	if AbortCause(nil).Error() != "aborted" || AbortCause(cause) != cause {
		t.Error("AbortCause")
	}
}
