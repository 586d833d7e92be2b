package allreduce_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// TestMissingRank: in process, a rank that never calls the collective the
// others are in is named, with the call, in every other rank's error,
// for every AllReduce algorithm that runs on the world (Auto included),
// on odd and even worlds, with the missing rank varied.
func TestMissingRank(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, n := range []int{2, 3, 4, 5} {
		probe, _, err := allreducetest.InprocConns(n, timeout)
		if err != nil {
			t.Fatal(err)
		}
		for _, algo := range allreducetest.AlgorithmsFor(probe[0]) {
			missing := (n/2 + int(algo)) % n // varied, deterministic
			{
				t.Run(fmt.Sprintf("n=%d/%v/missing=%d", n, algo, missing), func(t *testing.T) {
					t.Parallel()
					conns, _, err := allreducetest.InprocConns(n, timeout)
					if err != nil {
						t.Fatal(err)
					}
					if err := allreducetest.MissingRank(conns, missing, 1000, timeout, allreduce.WithAlgorithm(algo)); err != nil {
						t.Error(err)
					}
				})
			}
		}
	}
}
