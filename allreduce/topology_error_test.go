package allreduce_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
)

// Auto learns the topology inside its first call: when the ranks call
// different collectives first, the errors name the calls the users made
// (here rank 0's AllReduce), not the all-gather that learns the topology.
func TestTopologyMismatchNamesTheUsersCall(t *testing.T) {
	const n = 3
	conns := tcpWorld(t, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := allreduce.NewGroup(c, allreduce.WithNode("host"))
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Close()
			buf := make([]float32, 1024)
			if r == 0 {
				errs[r] = allreduce.AllReduce(context.Background(), g, buf, allreduce.Sum)
			} else {
				errs[r] = allreduce.Broadcast(context.Background(), g, buf, 0)
			}
		}()
	}
	wg.Wait()
	want := "allreduce: rank 0 called #0 AllReduce(float32 × 1024, Sum), in its #0 AllGather(int64 × 3) on group"
	if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("rank 0: %v, want an error starting %q", errs[0], want)
	}
	for r := 1; r < n; r++ {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "Broadcast(float32 × 1024, root 0)") {
			t.Errorf("rank %d: %v, want an error naming its Broadcast", r, errs[r])
		}
	}
}
