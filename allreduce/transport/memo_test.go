package transport_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestMemo: many ranks asking for the same keys at once compute each
// key's value once and all get it.
func TestMemo(t *testing.T) {
	var memo transport.Memo
	var computed atomic.Int64
	var wg sync.WaitGroup
	got := make([][3]int, 64)
	for r := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 {
				got[r][k] = memo.Do(k, func() any { computed.Add(1); return k * 10 }).(int)
			}
		}()
	}
	wg.Wait()
	if n := computed.Load(); n != 3 {
		t.Errorf("%d computations for 3 keys", n)
	}
	for r, g := range got {
		if g != [3]int{0, 10, 20} {
			t.Errorf("rank %d got %v", r, g)
		}
	}
}
