package heal_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/internal/run/heal"
)

// Identify alone (ZeRO-1 checks identities before its shards move): a
// joiner of this job and model passes on every rank, with nothing moved;
// one of another job, or of another model, is refused on every rank with
// Heal's words.
func TestIdentify(t *testing.T) {
	for _, c := range []struct {
		name   string
		joiner heal.State[float32]
		want   string
	}{
		{"same job", fresh[float32](99, ""), ""},
		{"another job", heal.State[float32]{JobID: "job-other", RunID: "run-a", Params: make([]float32, 99)},
			`rank 1 (joining) is of job "job-other", run "run-a"; rank 0's of job "job-1", run "run-a": refused`},
		{"another model", fresh[float32](98, ""), "rank 1 (joining) has 98 parameters of 4 bytes, rank 0 99 of 4 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns, _, err := allreducetest.InprocConns(3, 10*time.Second)
			require.NoError(t, err)
			states := make([]heal.State[float32], 3)
			for r := range states {
				states[r] = replica[float32](99, 0, 5)
				states[r].Optim.Optimizer = "" // ZeRO-1: no optimizer state through Heal
			}
			states[1] = c.joiner
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				return heal.Identify(context.Background(), g, []int{1}, &states[g.Rank()])
			})
			for r, err := range errs {
				if c.want == "" {
					require.NoError(t, err, "rank %d", r)
					continue
				}
				require.ErrorContains(t, err, c.want, "rank %d", r)
			}
			require.Equal(t, make([]float32, len(c.joiner.Params)), states[1].Params, "nothing moved")
		})
	}
}
