package allreduce_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestShift is allreducetest.ShiftSuite over in-process ranks.
func TestShift(t *testing.T) {
	allreducetest.ShiftSuite(t, func(tb testing.TB, n int) []transport.Conn {
		conns, _, err := allreducetest.InprocConns(n, 20*time.Second)
		if err != nil {
			tb.Fatal(err)
		}
		return conns
	}, []int{1, 2, 3, 4, 5}, true)
}
