package allreduce

import (
	"context"
	"math"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// TestChainChoice: Broadcast and Reduce go by chain exactly where the
// group's model predicts the chain faster than the binomial tree (at the
// size class's lower end), never on one or two ranks; with the default
// models that is the large buffers (64 MiB) and not the small (64 KiB).
func TestChainChoice(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7} {
		w, err := inproc.NewWorld(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, pm := range []bool{false, true} {
			g, err := NewGroup(w.Conn(0), WithModel(cost.DefaultModel(pm)))
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []Kind{KindBroadcast, KindReduce} {
				useChain := func(b int) bool {
					a, err := g.pick(context.Background(), kind, b)
					return err == nil && a == uint8(RootedChain)
				}
				for b := 1; b <= 256<<20; b *= 4 {
					got := useChain(b)
					s, cb := cost.FlatShape(n), float64(classBytes(sizeClass(b)))
					tr, _ := scheduleOf(kind, uint8(RootedTree))
					ch, _ := scheduleOf(kind, uint8(RootedChain))
					tree, chain := tr.predict(g.model, s, cb), ch.predict(g.model, s, cb)
					if want := n > 2 && chain < tree; got != want {
						t.Errorf("n=%d %v %d B: chain %v, want %v (tree %.3g s, chain %.3g s)", n, kind, b, got, want, tree, chain)
					}
					// PredictRooted, for -explain, says what the group runs.
					p, err := PredictRooted(g.model, s, kind, b)
					if err != nil || p.Chain != got || (n > 1 && !(p.TreeSeconds > 0)) || (n <= 2 && !math.IsInf(p.ChainSeconds, 1)) {
						t.Errorf("n=%d %v %d B: PredictRooted %+v, %v; the group goes by chain: %v", n, kind, b, p, err, got)
					}
				}
				if n > 2 && (!useChain(64<<20) || useChain(64<<10)) {
					t.Errorf("n=%d %v: chain at 64 MiB %v, at 64 KiB %v; want true, false", n, kind, useChain(64<<20), useChain(64<<10))
				}
			}
		}
	}
}

// TestPredictRootedKinds: only Broadcast and Reduce have schedules to
// predict.
func TestPredictRootedKinds(t *testing.T) {
	if _, err := PredictRooted(cost.DefaultModel(false), cost.FlatShape(4), KindAllGather, 1<<20); err == nil {
		t.Error("PredictRooted of an AllGather: no error")
	}
}
