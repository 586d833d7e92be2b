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

// BenchmarkHeal heals one joiner of 4 in-process ranks with the state of
// zero's benchmark model (MLP 784-2048-2048-10: 5.8 M float32 parameters,
// Adam's two float64 buffers), reporting the time and each sender's bytes.
func BenchmarkHeal(b *testing.B) {
	const ranks, params = 4, 784*2048 + 2048 + 2048*2048 + 2048 + 2048*10 + 10
	want := replica[float32](params, 2, 64)
	for range b.N {
		conns, _, err := allreducetest.InprocConns(ranks, time.Minute)
		require.NoError(b, err)
		states := make([]heal.State[float32], ranks)
		for r := range states {
			states[r] = want
		}
		states[3] = fresh[float32](params, "adam")
		reports := make([]heal.Report, ranks)
		errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
			var err error
			reports[g.Rank()], err = heal.Heal(context.Background(), g, []int{3}, &states[g.Rank()])
			return err
		})
		require.NoError(b, allreducetest.FirstError(errs))
		rep := reports[0]
		b.ReportMetric(float64(rep.StateBytes)/(1<<20), "state-MiB")
		b.ReportMetric(float64(rep.Sent[0])/(1<<20), "rank0-sent-MiB")
		b.ReportMetric(float64(rep.Sent[2])/(1<<20), "rank2-sent-MiB")
		b.ReportMetric(rep.Duration.Seconds()*1e3, "heal-ms")
	}
}
