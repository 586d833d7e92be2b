package ddp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
)

// plainConn hides the in-process transport's shared memory, so that Auto
// picks what it picks between processes (recursive doubling, then the ring).
type plainConn struct{ transport.Conn }

// linearNet is a model whose gradients are chosen numbers: parameters p_i
// (vectors of the given sizes, created in order, so p_0 lands in the last
// bucket) and loss Σ_i Σ_j p_i[j]·c_i[j], whose gradient for p_i is c_i.
type linearNet struct {
	vm     G.VM
	params G.Nodes
	coef   [][]float32 // c_i: this rank's gradients
	loss   *G.Node
}

func newLinearNet(t testing.TB, g *allreduce.Group, sizes []int, seed uint64, opts ...ddp.Option) (*linearNet, *ddp.DDP[float32]) {
	return newLinearNetWrapped(t, g, sizes, seed, func(params G.Nodes) (*ddp.DDP[float32], error) {
		return ddp.Wrap[float32](context.Background(), g, params, opts...)
	})
}

// newLinearNetWrapped is newLinearNet with the parameters wrapped by wrap
// (ZeRO-1's, for one).
func newLinearNetWrapped(t testing.TB, g *allreduce.Group, sizes []int, seed uint64, wrap func(G.Nodes) (*ddp.DDP[float32], error)) (*linearNet, *ddp.DDP[float32]) {
	rng := rand.New(rand.NewPCG(seed, uint64(g.Rank())))
	gr := G.NewGraph()
	n := &linearNet{}
	require.NoError(t, graphlock.Do(func() error {
		for i, s := range sizes {
			v := make([]float32, s)
			for j := range v {
				v[j] = float32(rng.NormFloat64())
			}
			n.params = append(n.params, G.NewVector(gr, tensor.Float32, G.WithShape(s), G.WithName(fmt.Sprintf("p%d", i)),
				G.WithValue(tensor.New(tensor.WithShape(s), tensor.WithBacking(v)))))
		}
		return nil
	}))
	d, err := wrap(n.params)
	require.NoError(t, err)
	var loss *G.Node
	require.NoError(t, graphlock.Do(func() error {
		for i, p := range d.Tapped() {
			c := make([]float32, sizes[i])
			for j := range c {
				c[j] = float32(rng.NormFloat64())
			}
			n.coef = append(n.coef, c)
			cn := G.NewVector(gr, tensor.Float32, G.WithShape(sizes[i]), G.WithName(fmt.Sprintf("c%d", i)),
				G.WithValue(tensor.New(tensor.WithShape(sizes[i]), tensor.WithBacking(c))))
			term, err := G.Sum(G.Must(G.HadamardProd(p, cn)))
			if err != nil {
				return err
			}
			if loss == nil {
				loss = term
			} else if loss, err = G.Add(loss, term); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, d.Backward(loss))
	require.NoError(t, graphlock.Do(func() error { n.vm = G.NewTapeMachine(gr); return nil }))
	n.loss = loss
	return n, d
}

// TestAgreementKeepsGradientsBitwise: the loss and stop vote riding with
// the last bucket leave every gradient bitwise what an all-reduce of each
// bucket alone gives (the reference: allreduce.AllReduce of this rank's
// gradients, bucket by bucket, in the same group), for every algorithm in
// allreduce's table (and Auto between processes), on 2 to 4 ranks in nodes
// of 2, with last buckets on both sides of Auto's switch from recursive
// doubling to the ring. The agreed loss is the mean of the ranks' losses
// and the vote of one rank stops all.
func TestAgreementKeepsGradientsBitwise(t *testing.T) {
	type variant struct {
		name  string
		alg   allreduce.Algorithm
		plain bool // hide shared memory and topology: Auto between processes
	}
	variants := []variant{{"auto-between-processes", allreduce.Auto, true}}
	for _, a := range allreduce.Algorithms() {
		variants = append(variants, variant{a.String(), a, false})
	}
	// Last bucket sizes in float32 elements: small, a power-of-two size
	// class boundary of Auto (64 KiB) less one element and exactly (the two
	// values tip the first over it), one past it, and large.
	lasts := []int{100, 16383, 16384, 16385, 50001}
	for _, ranks := range []int{2, 3, 4} {
		for _, v := range variants {
			for _, last := range lasts {
				t.Run(fmt.Sprintf("ranks=%d/%s/last=%d", ranks, v.name, last), func(t *testing.T) {
					if testing.Short() && last != 16384 && last != 50001 {
						t.Skip("short")
					}
					w, err := inproc.NewWorld(ranks, inproc.WithTimeout(20*time.Second), inproc.WithLocalSize(2))
					require.NoError(t, err)
					conns := make([]transport.Conn, ranks)
					for r := range conns {
						conns[r] = w.Conn(r)
						if v.plain {
							conns[r] = plainConn{conns[r]}
						}
					}
					// An algorithm this world cannot run (NewGroup says why)
					// is not this test's business.
					g, err := allreduce.NewGroup(conns[0], allreduce.WithAlgorithm(v.alg))
					for _, c := range conns[1:] {
						_ = c.Close()
					}
					if err != nil {
						t.Skipf("%s: %v", v.name, err)
					}
					_ = g.Close()
					w, err = inproc.NewWorld(ranks, inproc.WithTimeout(20*time.Second), inproc.WithLocalSize(2))
					require.NoError(t, err)
					for r := range conns {
						conns[r] = w.Conn(r)
						if v.plain {
							conns[r] = plainConn{conns[r]}
						}
					}
					sizes := []int{last, 300, 7} // p0 is the last bucket; p1, p2 the others
					errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
						return checkAgreement(t, g, sizes)
					}, allreduce.WithAlgorithm(v.alg))
					require.NoError(t, allreducetest.FirstError(errs))
				})
			}
		}
	}
}

func checkAgreement(t *testing.T, g *allreduce.Group, sizes []int) error {
	ctx := context.Background()
	vote := g.Rank() == g.Size()-1
	// Buckets: p2+p1 (first), p0 alone.
	n, d := newLinearNet(t, g, sizes, 11, ddp.WithBucketBytes(4*(sizes[1]+sizes[2]), 4*(sizes[1]+sizes[2])),
		ddp.WithAgreement(func() bool { return vote }))
	if b := d.BucketRanges(); len(b) != 2 || b[1][1]-b[1][0] != sizes[0] {
		return fmt.Errorf("buckets %v, want p0 alone in the last", b)
	}
	if err := d.Run(ctx, n.vm); err != nil {
		return err
	}
	// The reference: this rank's gradients (the coefficients), each bucket
	// all-reduced alone.
	want := make([]float32, len(d.GradArena()))
	for i, c := range n.coef {
		lo, _ := d.Offset(i)
		copy(want[lo:], c)
	}
	for _, b := range d.BucketRanges() {
		if err := allreduce.AllReduce(ctx, g, want[b[0]:b[1]], allreduce.Avg); err != nil {
			return err
		}
	}
	for i, x := range d.GradArena() {
		if math.Float32bits(x) != math.Float32bits(want[i]) {
			return fmt.Errorf("gradient element %d: %v, an all-reduce of its bucket alone gives %v", i, x, want[i])
		}
	}
	// The agreed loss is the mean of the ranks' own losses, the loss
	// node's values (each rank's p·c differs: the c are the rank's own).
	l32, ok := n.loss.Value().Data().(float32)
	if !ok {
		return fmt.Errorf("loss value %T", n.loss.Value())
	}
	loss := float64(l32)
	if ref := referenceLoss(d, n.coef); math.Abs(ref-loss) > 1e-4*math.Max(1, math.Abs(ref)) {
		return fmt.Errorf("the graph's loss %v, Σ p·c is %v", loss, ref)
	}
	losses := make([]float64, g.Size())
	if err := allreduce.AllGather(ctx, g, losses, []float64{loss}); err != nil {
		return err
	}
	mean := 0.0
	for _, l := range losses {
		mean += l
	}
	mean /= float64(g.Size())
	got := d.Agreed()
	if math.Abs(got.Loss-mean) > 1e-5*math.Max(1, math.Abs(mean)) {
		return fmt.Errorf("agreed loss %v, the ranks' mean is %v (%v)", got.Loss, mean, losses)
	}
	if !got.Stop {
		return fmt.Errorf("rank %d voted to stop, rank %d did not hear it", g.Size()-1, g.Rank())
	}
	// Under NoSync nothing is communicated: the agreement is this rank's.
	if err := d.NoSync(func() error { return d.Run(ctx, n.vm) }); err != nil {
		return err
	}
	if got := d.Agreed(); got.Loss != loss || got.Stop != vote {
		return fmt.Errorf("NoSync agreement %+v, want this rank's loss %v and vote %v", got, loss, vote)
	}
	return nil
}

// referenceLoss is Σ_i Σ_j p_i[j]·c_i[j] in float64 from the arena.
func referenceLoss(d *ddp.DDP[float32], coef [][]float32) float64 {
	sum := 0.0
	params := d.ParamArena()
	for i, c := range coef {
		lo, _ := d.Offset(i)
		for j, x := range c {
			sum += float64(params[lo+j]) * float64(x)
		}
	}
	return sum
}
