package zero_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// BenchmarkReshardMLP measures a re-shard of cmd/train's default MLP
// (784-256-128-10, float32, 235,146 parameters) with Adam (3.76 MB of
// state) and buddies, in cmd/train's default buckets, over in-process
// ranks whose sends are counted: 4 → 3 ranks (rank 2 lost; rank 3 lost,
// whose buddy is rank 0) and 3 → 4 (a joiner last). It reports the bytes
// on the wire during Regroup, in all and the most any rank sent, and its
// time (docs/elastic.md has the figures).
func BenchmarkReshardMLP(b *testing.B) {
	for _, c := range []struct {
		name string
		tr   zero.Transition
	}{
		{"4to3-lost2", zero.Transition{OldSize: 4, Old: []int{0, 1, 3}}},
		{"4to3-lost3", zero.Transition{OldSize: 4, Old: []int{0, 1, 2}}},
		{"3to4-join", zero.Transition{OldSize: 3, Old: []int{0, 1, 2, -1}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			old := mlpWorld(b, c.tr.OldSize, nil)
			var total, most int64
			var took time.Duration
			for range b.N {
				sent := make([]atomic.Int64, len(c.tr.Old))
				mlpWorld(b, len(c.tr.Old), func(g *allreduce.Group, to *zero.ZeRO1[float32]) error {
					var from *zero.ZeRO1[float32]
					if o := c.tr.Old[g.Rank()]; o >= 0 {
						from = old[o]
					}
					before := g.Conn().(*countingConn).sent.Load()
					began := time.Now()
					err := zero.Regroup(context.Background(), from, to, c.tr)
					if g.Rank() == 0 {
						took += time.Since(began)
					}
					sent[g.Rank()].Store(g.Conn().(*countingConn).sent.Load() - before)
					return err
				})
				total, most = 0, 0
				for r := range sent {
					total += sent[r].Load()
					most = max(most, sent[r].Load())
				}
			}
			b.ReportMetric(float64(total), "wire-B")
			b.ReportMetric(float64(most), "wire-B-max-rank")
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/reshard")
		})
	}
}

// mlpWorld wraps the MLP with buddies on n counted in-process ranks; with
// then nil, each loads an Adam state of 5 steps (random) and the
// wrappers are returned, else then runs on every rank.
func mlpWorld(b *testing.B, n int, then func(g *allreduce.Group, z *zero.ZeRO1[float32]) error) []*zero.ZeRO1[float32] {
	conns, _, err := allreducetest.InprocConns(n, 30*time.Second)
	require.NoError(b, err)
	for i, c := range conns {
		conns[i] = &countingConn{Conn: c}
	}
	zs := make([]*zero.ZeRO1[float32], n)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		graph := G.NewGraph()
		m, err := models.NewMLP(graph, tensor.Float32, 1, 784, 256, 128, 10)
		if err != nil {
			return err
		}
		cfg := optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
		opt, err := optim.NewAdam[float32](cfg)
		if err != nil {
			return err
		}
		shadow, err := optim.NewAdam[float32](cfg)
		if err != nil {
			return err
		}
		z, err := zero.WrapWithBuddy[float32](context.Background(), g, m.Learnables(), opt, shadow)
		if err != nil {
			return err
		}
		zs[g.Rank()] = z
		if then != nil {
			return then(g, z)
		}
		st := opt.State()
		total := len(z.DDP().ParamArena())
		st.Step, st.Len = 5, total
		rng := rand.New(rand.NewPCG(1, 2))
		for _, name := range []string{"exp_avg", "exp_avg_sq"} {
			data := make([]float64, total)
			for i := range data {
				data[i] = float64(float32(rng.NormFloat64()))
			}
			st.Buffers = append(st.Buffers, optim.Buffer{Name: name, Data: data})
		}
		return z.LoadFullOptimizerState(st)
	})
	require.NoError(b, allreducetest.FirstError(errs))
	require.False(b, slices.Contains(zs, nil))
	return zs
}
