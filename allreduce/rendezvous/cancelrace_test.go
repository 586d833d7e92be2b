package rendezvous

import (
	"context"
	"testing"
	"time"
)

// A call whose context is cancelled as its reply arrives must not leave
// its connection in the pool with the past deadline the cancellation
// sets: the next call on it would fail at once ("no answer from store").
// Each round cancels a Set at a different moment around its reply, then
// makes a call that must succeed.
func TestCancelRacingReplyLeavesNoDeadConnection(t *testing.T) {
	srv := startServer(t, testStoreConfig())
	c, err := DialStore(context.Background(), srv.Addr().String(), testStoreConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rounds := 400
	if testing.Short() {
		rounds = 100
	}
	for i := range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Set(ctx, "k", []byte("v"))
		}()
		time.Sleep(time.Duration(i%40) * 5 * time.Microsecond)
		cancel()
		<-done
		if err := c.Set(context.Background(), "after", []byte("v")); err != nil {
			t.Fatalf("round %d: a call after a cancelled one failed: %v", i, err)
		}
	}
}
