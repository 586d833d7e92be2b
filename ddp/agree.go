package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
)

// The agreement: with WithAgreement every synchronised Run also averages
// two values over the ranks, the step's loss and a stop vote, without a
// collective of their own. They sit right after the gradient arena, in the
// commArena's tail, and the last bucket's collective carries them. The
// gradients stay bitwise what a collective of the bucket alone gives,
// which takes some care because a ring's reduction order depends on where
// an element falls in the chunk layout (see reduceLast).

// agreementValues is the number of values the last bucket carries: the
// loss and the stop vote.
const agreementValues = 2

// Agreement is what the ranks agreed on in the last Run (WithAgreement).
type Agreement struct {
	Loss float64 // the loss (the node given to Backward) averaged over ranks
	Stop bool    // whether any rank's vote was true
	// With WithArrivalStamps, after a synchronised Run: Stamped is true,
	// Last is the rank that handed in its last bucket last (the lowest
	// such rank on a tie) and Lag how long after the rank before it.
	Stamped bool
	Last    int
	Lag     time.Duration
}

// WithAgreement makes every synchronised Run also agree over all ranks on
// the step's loss (averaged) and on whether to stop (true when any rank's
// vote returns true), read afterwards with Agreed. The two values ride
// with the last gradient bucket's collective, so agreeing costs no
// synchronisation point of its own (with a custom bucket collective, such
// as zero's reduce-scatter, they take a tiny all-reduce right after it).
// vote is called once per Run on the machine's goroutine, when the last
// bucket's gradients are complete.
func WithAgreement(vote func() bool) Option { return func(c *config) { c.vote = vote } }

// Agreed is the last Run's agreement (WithAgreement; zero without it).
// After a Run under NoSync nothing was communicated: it holds this rank's
// own loss and vote.
func (d *DDP[T]) Agreed() Agreement { return d.agreed }

// fillAgreement writes this rank's loss and vote into the extras.
func (d *DDP[T]) fillAgreement() error {
	if len(d.extras) == 0 {
		return nil
	}
	if d.loss == nil {
		return errors.New("ddp: WithAgreement needs Backward's loss")
	}
	loss, err := scalarValue(d.loss.Value())
	if err != nil {
		return fmt.Errorf("ddp: reading the loss: %w", err)
	}
	d.extras[0] = T(loss) // exact: the loss is a T
	d.extras[1] = 0
	if d.cfg.vote() {
		d.extras[1] = 1
	}
	return nil
}

// settleAgreement records the agreement after Run's communication.
func (d *DDP[T]) settleAgreement() error {
	if len(d.extras) == 0 {
		return nil
	}
	if !d.syncing {
		if err := d.fillAgreement(); err != nil {
			return err
		}
	}
	d.agreed = Agreement{Loss: float64(d.extras[0]), Stop: d.extras[1] > 0}
	if d.syncing && d.arrivals != nil {
		d.settleStamps()
	}
	return nil
}

// collectiveName names a bucket's collective of bytes for the Observer.
func (d *DDP[T]) collectiveName(bytes int) string {
	switch {
	case d.cfg.collectiveName != "":
		return d.cfg.collectiveName
	case d.reduce != nil:
		return "custom"
	}
	return "allreduce " + d.group.AlgorithmFor(bytes).String()
}

// reduceBucket communicates bucket [lo, hi) of the gradient arena: the
// custom collective, or an all-reduce (Avg) that tells fin (nil: nobody)
// the parts of the bucket as they become final.
func (d *DDP[T]) reduceBucket(ctx context.Context, lo, hi int, fin allreduce.RangeDone) error {
	if d.reduce != nil {
		return d.reduce(ctx, d.group, d.gradArena, lo, hi)
	}
	return allreduce.AllReduceRanges(ctx, d.group, d.gradArena[lo:hi], allreduce.Avg, fin)
}

// reduceLast communicates the last bucket [lo, hi) together with the
// agreement's values, which follow it in the commArena (hi is the end of
// the gradient arena). Every gradient element is reduced in the same order
// as by reduceBucket:
//   - where the algorithm's order does not depend on an element's place
//     (allreduce.OrderAnyPlace: in-process direct, recursive doubling), and
//     on 2 ranks whatever the algorithm (one addition, which commutes):
//     one all-reduce of the bucket and the values;
//   - the ring's order over 3 or more ranks (allreduce.OrderRingChunks)
//     reduces chunk q in the order q+1, ..., q, so a longer buffer would
//     move chunk boundaries: a reduce-scatter and an all-gather with the
//     bucket's own chunk layout and the values appended to the last chunk,
//     which is the ring all-reduce step for step;
//   - otherwise (a bucket that Auto would reduce by recursive doubling or
//     directly but whose appended values would tip it over to another
//     algorithm; the tree,
//     halving-doubling and topology-aware algorithms, whose order also
//     depends on position; custom collectives, which need not leave every
//     rank every value): the bucket's own collective, then an all-reduce
//     of the values right after it.
//
// fin, when set, is told the parts of the collective's buffer (which
// starts at lo) as they become final (allreduce.AllReduceRanges); the
// values after hi are its to ignore.
func (d *DDP[T]) reduceLast(ctx context.Context, lo, hi int, fin allreduce.RangeDone) error {
	k := len(d.extras)
	if k == 0 {
		return d.reduceBucket(ctx, lo, hi, fin)
	}
	if hi != len(d.gradArena) {
		return fmt.Errorf("ddp: the last bucket ends at %d, the arena at %d", hi, len(d.gradArena))
	}
	g := d.group
	var z T
	bytes := (hi - lo) * int(unsafe.Sizeof(z))
	n, alg := g.Size(), g.AlgorithmFor(bytes)
	// The algorithm the bucket with its values appended would run.
	withExtras := g.AlgorithmFor(bytes + k*int(unsafe.Sizeof(z)))
	switch {
	case d.reduce != nil:
	case n <= 2 || alg == withExtras && alg.Order() == allreduce.OrderAnyPlace:
		return allreduce.AllReduceRanges(ctx, g, d.commArena[lo:hi+k], allreduce.Avg, fin)
	case alg.Order() == allreduce.OrderRingChunks:
		return d.ringWithExtras(ctx, lo, hi, fin)
	}
	if err := d.reduceBucket(ctx, lo, hi, fin); err != nil {
		return err
	}
	return allreduce.AllReduce(ctx, g, d.extras, allreduce.Avg)
}

// ringWithExtras is the ring all-reduce (Avg) of commArena[lo:] with the
// chunk layout of the gradients [lo, hi) alone, the extras added to the
// last chunk: a reduce-scatter then an all-gather with that layout.
func (d *DDP[T]) ringWithExtras(ctx context.Context, lo, hi int, fin allreduce.RangeDone) error {
	g := d.group
	n, rank := g.Size(), g.Rank()
	if len(d.counts) != n {
		d.counts = make([]int, n)
	}
	own := 0
	for q := range n {
		a, b := allreduce.ChunkBounds(hi-lo, n, q)
		d.counts[q] = b - a
		if q < rank {
			own += b - a
		}
	}
	d.counts[n-1] += len(d.extras)
	buf := d.commArena[lo:]
	mine := buf[own : own+d.counts[rank]]
	po, _ := d.cfg.observer.(PhaseObserver)
	began := time.Now()
	if err := allreduce.ReduceScatterV(ctx, g, mine, buf, d.counts, allreduce.Avg); err != nil {
		return err
	}
	scattered := time.Now()
	err := allreduce.AllGatherVRanges(ctx, g, buf, mine, d.counts, fin)
	if po != nil {
		last := len(d.buckets) - 1
		po.BucketPhase(last, "reduce-scatter", began, scattered)
		po.BucketPhase(last, "all-gather", scattered, time.Now())
	}
	return err
}

// scalarValue reads a scalar node value.
func scalarValue(v G.Value) (float64, error) {
	switch x := v.(type) {
	case *G.F32:
		return float64(*x), nil
	case *G.F64:
		return float64(*x), nil
	case tensor.Tensor:
		if x.Shape().TotalSize() == 1 {
			switch data := x.Data().(type) {
			case float32:
				return float64(data), nil
			case float64:
				return data, nil
			case []float32:
				return float64(data[0]), nil
			case []float64:
				return data[0], nil
			}
		}
	}
	return 0, fmt.Errorf("value is %T, want a float scalar", v)
}
