package allreduce_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// What Choose names (cmd/bench -explain's pick) is what a group runs: for
// random models (two links each, the inter-node one often much slower),
// layouts and sizes that are not powers of two, every rank's record of
// the algorithm Auto ran for the call equals Choose on the layout's shape.
func TestChooseIsWhatRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := 40
	if testing.Short() {
		cases = 12
	}
	for i := range cases {
		m := randomModel(rng)
		n := 2 + rng.IntN(7)
		ls := rng.IntN(n + 1) // 0: no topology
		s := cost.NodesShape(n, ls)
		if ls == 0 {
			s = cost.FlatShape(n)
		}
		s.PeerMemory = true
		var sizes []int
		for range 4 {
			k := 3 + rng.IntN(20)
			sizes = append(sizes, (1<<k+rng.IntN(1<<k))&^3)
		}
		t.Run(fmt.Sprintf("%d/n%d-l%d", i, n, ls), func(t *testing.T) {
			conns := allreducetest.Inproc(20*time.Second, inproc.WithLocalSize(ls))(t, n)
			ran := make([][]allreduce.Algorithm, n)
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				for _, b := range sizes {
					if err := allreduce.AllReduce(context.Background(), g, make([]float32, b/4), allreduce.Sum); err != nil {
						return err
					}
					ran[g.Rank()] = append(ran[g.Rank()], allreduce.AutoRan(g, b))
				}
				return nil
			}, allreduce.WithModel(m))
			if err := allreducetest.FirstError(errs); err != nil {
				t.Fatal(err)
			}
			for j, b := range sizes {
				want := allreduce.Choose(m, s, b)
				for r := range n {
					if ran[r][j] != want {
						t.Errorf("%d B on %+v: rank %d ran %v, Choose names %v", b, s, r, ran[r][j], want)
					}
				}
			}
		})
	}
}
