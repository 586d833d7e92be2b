package zero

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"unsafe"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// Buddies: a copy of every shard's optimizer state on a second rank, so that
// the state survives the loss of one rank (issue #34).
//
// Vocabulary (N ≥ 2 ranks):
//   - buddy: rank r's buddy is b = (r+d) mod N, for the world's buddy
//     offset d (1: its ring neighbour; buddy_place.go). Rank b
//     holds a second copy of rank r's shard state, the buddy state, in a
//     shadow optimizer of the same kind and hyper-parameters as r's own.
//     Every rank is the buddy of exactly one other (r-d mod N, its left).
//   - replay: the buddy does not receive the state. The new state of a
//     shard is a function of its old state (the buddy holds it), the
//     shard's parameters before the update (every rank holds them: the
//     arena is replicated) and the shard's averaged gradient, the only input
//     the buddy lacks: rank r sends its GradShard to b, and b runs the same
//     optimizer step on its copy. That is what changed, and no more: 1/N of
//     the gradient arena per rank and step, half of what sending Adam's two
//     state buffers would cost and no serialisation of the state. The
//     optimizer is elementwise and deterministic, so the copy stays bitwise
//     equal to the original; the buddy checks it every step against the
//     parameters the all-gather brings (its replay computes them too).
//   - self: a second optimizer over the rank's own shard, one step behind
//     the shard's during a step and level with it after: the step's own
//     update is replayed on it once the step has completed (the version a
//     failure rolls back to, buddy_keep.go).
//
// A step with buddies, on rank r (Run's and Step's hooks):
//
//  1. in Run, as soon as a bucket's reduce-scatter has completed
//     (exchangeBucket): issue the transfers that send the bucket's piece
//     of GradShard to the buddy and receive the left's piece of it
//     (one-way transfers in pair groups, below), without waiting for
//     them: the hop that carries each piece to a second rank, one more
//     than the reduce-scatter's. The transport runs the calls of a family
//     of groups one at a time in issue order, so each bucket's hop runs
//     between its reduce-scatter and the next bucket's, overlapping the
//     rest of the backward pass as the reduce-scatters do, and the last
//     bucket's overlaps what follows it on this rank: the end of Run, the
//     caller's code up to Step, and Step's update of the shard;
//  2. in Step, before the update (begin): copy the own and the left
//     shard's parameters out of the arena (they are about to change);
//     after it (receive): wait for the hop in flight and check that every
//     bucket's left piece arrived, before the all-gather is issued.
//     Ordering: rank r+1 sends nothing of the all-gather before it holds
//     r's gradient, and no rank's all-gather of a bucket can complete
//     before every rank has sent into it, so a completed all-gather on any
//     rank proves that every buddy holds its left's gradient of the step.
//     That is the weakest wait that proves it: the all-gather could only
//     start earlier if some rank's completion did not need the late
//     rank's data, and the ring all-gather's does. Waiting later (at the
//     end of Step) would let a rank complete the step while a buddy still
//     lacked the gradient, and would win nothing here: the transport runs
//     the hop before the all-gather issued after it anyway, so the wait
//     costs only the hop's own latency, now overlapped with the update;
//  3. after the all-gather (end), the step complete on this rank: replay
//     the left's update on the copy and the own update on self, and
//     compare the copy's parameters with the gathered ones (a mismatch is
//     an error: the copy diverged).
//
// The replays come after the all-gather, not during it, so that neither
// the copy nor self is ever ahead of the steps this rank has completed:
// self is the own shard's version at the last completed Step, the version
// a failure in the next step may have to roll back to, kept by replaying
// the update (no copy of the state, no allocation), and the copy is at
// the same step, or one behind with the gradient that brings it level
// (buddy_keep.go).
//
// The transfer r → r+d of a piece is a one-way AllGatherV in a group of
// the two ranks (r first, contributing its piece; r+d contributing
// nothing), made once by Split: the N edges are coloured so that no
// rank is in two edges of one colour (2 colours for even cycles, 3 for odd
// ones, as an odd cycle needs: edgeRound), and each colour is one Split,
// one round of the exchange. Each rank sends one shard and receives one per step,
// |shard|·size bytes each way. A ring all-gather of two ranks is one step,
// both ranks sending at once (the receiver an empty message): the data
// with no round trip before it, where a Broadcast first agrees on the call
// (a 0-byte message each way) and only then sends. With two ranks, each
// the other's buddy, the two edges are one allreduce.Shift by 1 on the
// wrapper's group: both pieces, both ways at once, one collective per
// bucket instead of two and no pair groups. With more ranks one Shift by
// d would also carry every piece in one exchange (and alone it is faster
// than the rounds), but in a step, every rank sending at once while the
// others compute, it cost more than the rounds where ranks share cores
// (docs/elastic.md, "Measured"), so the rounds stay.
//
// buddy is the state of one rank's buddy duty.
type buddy[T ddp.Float] struct {
	shadow      optim.Optimizer[T] // the left shard's optimizer (its copy)
	self        optim.Optimizer[T] // the own shard's optimizer at the last completed Step
	left        int                // the rank whose shard this rank holds
	offset      int                // the world's buddy offset: left is this rank - offset mod N
	leftPieces  []Piece            // the left rank's pieces
	ownPieces   []Piece            // this rank's pieces (the wrapper's)
	ownGrad     []T                // the wrapper's GradShard
	rounds      []*allreduce.Group // the pair group of each round, nil where this rank is in none
	sends       []bool             // per round: this rank sends (else it receives)
	counts      []int              // scratch: a transfer's AllGatherV counts
	group       *allreduce.Group   // the wrapper's group
	shiftCounts [][]int            // with two ranks, by bucket: both ranks' piece lengths (the Shift's counts); else nil
	params      []T                // the left shard's parameters at the copy's step, in shard order
	selfParams  []T                // the own shard's parameters at self's step, in shard order
	grad        []T                // the left shard's averaged gradient of the step in flight
	// arrived counts the buckets whose left piece grad holds, of the Run
	// in flight or last run (settle; buckets come in order).
	arrived int
	// hops is the hop in flight: the transfers of bucket inFlight, one per
	// round, issued and not yet settled; empty when none is.
	hops     []*allreduce.Work
	inFlight int
	// received: grad holds the left's gradient of the step in flight (the
	// exchange completed), to be replayed at learning rate lr.
	received bool
	lr       float64
	// primed: params and selfParams were copied from the arena since the
	// wrapper was made or its state loaded.
	primed bool
}

// WrapWithBuddyAt is Wrap with buddies at offset d (the same on every
// rank: BuddyOffset): shadow, a fresh optimizer of the same kind and
// configuration as opt, holds the copy of the left rank's shard state. It
// needs at least 2 ranks (with one rank no other rank can hold a copy: use
// Wrap and checkpoints). It is a collective over group (Wrap's parameter
// broadcast and, with more than two ranks, one Split per round).
func WrapWithBuddyAt[T ddp.Float](ctx context.Context, group *allreduce.Group, params G.Nodes, opt, shadow optim.Optimizer[T], d int, opts ...ddp.Option) (*ZeRO1[T], error) {
	n := group.Size()
	if n < 2 {
		return nil, fmt.Errorf("zero: buddies need at least 2 ranks, the group has %d: no other rank can hold a copy of the shard (train without buddies and rely on checkpoints)", n)
	}
	if err := checkOffset(n, d); err != nil {
		return nil, err
	}
	if shadow == nil || opt == nil {
		return nil, fmt.Errorf("zero: WrapWithBuddy needs an optimizer and a shadow optimizer")
	}
	if err := sameOptimizer(opt, shadow); err != nil {
		return nil, err
	}
	z, err := Wrap(ctx, group, params, opt, opts...)
	if err != nil {
		return nil, err
	}
	if z.ranged != nil {
		return nil, fmt.Errorf("zero: buddies replay the shard's whole update after the reduce-scatter; they cannot follow an update made in backward (ddp.WithOptimizerInBackward): use one or the other")
	}
	self, err := optim.NewFromState[T](opt.State())
	if err != nil {
		return nil, fmt.Errorf("zero: making the own shard's second version (a fresh %s): %w", opt.Name(), err)
	}
	b := &buddy[T]{shadow: shadow, self: self, group: group, left: (group.Rank() + n - d) % n, offset: d, ownPieces: z.pieces, ownGrad: z.gradShard,
		counts: make([]int, 2)}
	if b.leftPieces, err = Pieces(z.buckets, z.total, n, b.left); err != nil {
		return nil, err
	}
	size := 0
	for _, p := range b.leftPieces {
		size += p.Len()
	}
	b.params, b.grad, b.selfParams = make([]T, size), make([]T, size), make([]T, 0, z.shard)
	if n == 2 {
		if b.shiftCounts, err = hopCounts(z.buckets, z.total, n); err != nil {
			return nil, err
		}
	} else if err := b.split(ctx, group); err != nil {
		return nil, err
	}
	z.buddy = b
	return z, nil
}

// sameOptimizer checks that shadow is configured as opt: the same name and,
// bitwise, the same hyper-parameters; both fresh.
func sameOptimizer[T ddp.Float](opt, shadow optim.Optimizer[T]) error {
	a, b := opt.State(), shadow.State()
	if a.Step != 0 || b.Step != 0 {
		return fmt.Errorf("zero: the optimizer (%d steps) and its shadow (%d steps) must be fresh", a.Step, b.Step)
	}
	if a.Optimizer != b.Optimizer || len(a.Hyper) != len(b.Hyper) {
		return fmt.Errorf("zero: the shadow optimizer is %s with %d hyper-parameters, the optimizer %s with %d: they must be alike", b.Optimizer, len(b.Hyper), a.Optimizer, len(a.Hyper))
	}
	for i, h := range a.Hyper {
		if h.Name != b.Hyper[i].Name || math.Float64bits(h.Value) != math.Float64bits(b.Hyper[i].Value) {
			return fmt.Errorf("zero: the shadow optimizer's %s is %v, the optimizer's %s %v: they must be configured alike", b.Hyper[i].Name, b.Hyper[i].Value, h.Name, h.Value)
		}
	}
	return nil
}

// split makes the pair group of each round: in round c, edge e of colour c
// is the group {e, e+d mod n} with the sender first.
func (b *buddy[T]) split(ctx context.Context, g *allreduce.Group) error {
	n, r := g.Size(), g.Rank()
	for c := range buddyRounds(n, b.offset) {
		colour, key := -1, 0
		switch c {
		case edgeRound(r, n, b.offset):
			colour, key = r, 0 // the edge to the buddy: send
		case edgeRound(b.left, n, b.offset):
			colour, key = b.left, 1 // the edge from the left: receive
		}
		pair, err := g.Split(ctx, colour, key)
		if err != nil {
			return fmt.Errorf("zero: making the buddy pair groups (round %d): %w", c, err)
		}
		if pair != nil {
			b.rounds = append(b.rounds, pair)
			b.sends = append(b.sends, key == 0)
		}
	}
	return nil
}

// hopCounts is, by bucket, the piece length of every rank of n: the
// counts of each bucket's hop.
func hopCounts(buckets [][2]int, total, n int) ([][]int, error) {
	counts := make([][]int, len(buckets))
	for k := range counts {
		counts[k] = make([]int, n)
	}
	for r := range n {
		pieces, err := Pieces(buckets, total, n, r)
		if err != nil {
			return nil, err
		}
		for k, p := range pieces {
			counts[k][r] = p.Len()
		}
	}
	return counts, nil
}

// exchangeBucket is step 1 for bucket k, whose reduce-scatter has just
// completed: it issues, in each round, the transfer of this rank's piece
// of GradShard to its buddy or of its left's piece into grad, and returns
// without waiting for them (the hop in flight, hops). The calls of a
// group's family run one at a time in the order they were issued, so the
// hop of bucket k runs before the reduce-scatter of bucket k+1, and the
// last bucket's while Run returns and Step updates the shard; the first
// thing each later exchangeBucket and receive does is settle the hop in
// flight (for every bucket but the last it has completed by then). Nil-safe.
func (b *buddy[T]) exchangeBucket(ctx context.Context, k int) error {
	if b == nil {
		return nil
	}
	if err := b.settle(ctx); err != nil {
		return err
	}
	if k == 0 {
		b.arrived = 0 // a new Run's first bucket
	}
	own, left := b.ownPieces[k], b.leftPieces[k]
	b.inFlight = k
	// The hop outlives Run: a context that ends with Run (a caller's
	// per-Run timeout) must not cancel it. Whoever waits for it (settle)
	// gives up with its own context, and then aborts the family, which
	// ends the hop.
	ctx = context.WithoutCancel(ctx)
	if b.shiftCounts != nil {
		b.hops = append(b.hops, allreduce.ShiftAsync(ctx, b.group, b.grad[left.Off:left.Off+left.Len()],
			b.ownGrad[own.Off:own.Off+own.Len()], b.shiftCounts[k], 1))
		return nil
	}
	for i, pair := range b.rounds {
		if b.sends[i] {
			buf := b.ownGrad[own.Off : own.Off+own.Len()]
			b.counts[0], b.counts[1] = len(buf), 0
			b.hops = append(b.hops, allreduce.AllGatherVAsync(ctx, pair, buf, buf, b.counts))
		} else {
			buf := b.grad[left.Off : left.Off+left.Len()]
			b.counts[0], b.counts[1] = len(buf), 0
			b.hops = append(b.hops, allreduce.AllGatherVAsync(ctx, pair, buf, buf[len(buf):], b.counts))
		}
	}
	return nil
}

// settle waits for the hop in flight, if any (bucket inFlight's
// transfers), and counts the bucket as arrived. A failed or abandoned
// wait aborts the group's family (the transfer may still hold its
// buffers: the wrapper is not used after a failure).
func (b *buddy[T]) settle(ctx context.Context) error {
	if len(b.hops) == 0 {
		return nil
	}
	k := b.inFlight
	err := allreduce.WaitAll(ctx, b.hops...)
	clear(b.hops)
	b.hops = b.hops[:0]
	if err != nil {
		b.group.Abort(err)
		if b.shiftCounts != nil {
			return fmt.Errorf("zero: exchanging bucket %d's pieces of the shards' gradients with the buddy (ranks 0 and 1 hold each other's copy): %w", k, err)
		}
		return fmt.Errorf("zero: sending bucket %d's piece of the shard's gradient to the buddy, or receiving rank %d's for the copy this rank holds: %w", k, b.left, err)
	}
	b.arrived = k + 1
	return nil
}

// begin is step 2's first part: keep the own and the left shard's
// parameters before the update changes the arena; lr is the step's
// learning rate (this rank's optimizer's: a schedule sets it on the
// optimizer only). Nil-safe.
func (b *buddy[T]) begin(params []T, lr float64) {
	if b == nil {
		return
	}
	b.prime(params)
	b.received, b.lr = false, lr
}

// prime copies the own and the left shard's parameters out of the arena
// params.
func (b *buddy[T]) prime(params []T) {
	for _, p := range b.leftPieces {
		copy(b.params[p.Off:p.Off+p.Len()], params[p.Lo:p.Hi])
	}
	b.selfParams = b.selfParams[:0]
	for _, p := range b.ownPieces {
		b.selfParams = append(b.selfParams, params[p.Lo:p.Hi]...)
	}
	b.primed = true
}

// receive is step 2's second part: check that the left's gradient of
// the step arrived, all of it. A step whose GradShard no Run
// reduce-scattered (its caller filled it: tests, a step after Runs under
// ddp's NoSync) moves it here, every bucket's piece, so that the buddy
// always replays the gradient the shard is updated with. Nil-safe.
func (b *buddy[T]) receive(ctx context.Context, group *allreduce.Group) error {
	if b == nil {
		return nil
	}
	if b.arrived == 0 && len(b.hops) == 0 {
		for k := range b.leftPieces {
			if err := b.exchangeBucket(ctx, k); err != nil {
				return err
			}
		}
	}
	if err := b.settle(ctx); err != nil {
		return err
	}
	if b.arrived != len(b.leftPieces) {
		// Not after a successful Run: the wrapper is not used after a failed one.
		err := fmt.Errorf("zero: only %d of %d buckets' pieces of rank %d's gradient arrived: the buddy cannot replay the update", b.arrived, len(b.leftPieces), b.left)
		group.Abort(err)
		return err
	}
	b.received = true
	return nil
}

// end is step 3: when the all-gather succeeded (gatherErr nil), replay the
// step's updates on self and on the copy, and check the copy's parameters
// against the gathered ones. Nil-safe: without buddies it returns
// gatherErr.
func (b *buddy[T]) end(params []T, gatherErr error) error {
	if b == nil || gatherErr != nil {
		return gatherErr
	}
	if err := replay(b.self, b.lr, b.selfParams, b.ownGrad); err != nil {
		return fmt.Errorf("zero: replaying this rank's update on its second version: %w", err)
	}
	if err := replay(b.shadow, b.lr, b.params, b.grad); err != nil {
		return fmt.Errorf("zero: replaying rank %d's update on its copy: %w", b.left, err)
	}
	b.received, b.arrived = false, 0
	for _, p := range b.leftPieces {
		got, want := b.params[p.Off:p.Off+p.Len()], params[p.Lo:p.Hi]
		if bytes.Equal(rawBytes(got), rawBytes(want)) {
			continue
		}
		for i, v := range want {
			if !bytes.Equal(rawBytes(want[i:i+1]), rawBytes(got[i:i+1])) {
				return fmt.Errorf("zero: the copy of rank %d's shard diverged: parameter %d is %v after rank %d's update and %v after the copy's replay (are the optimizer and its shadow configured alike?)", b.left, p.Lo+i, v, b.left, got[i])
			}
		}
	}
	return nil
}

// rawBytes is the memory of s: two float slices are bitwise equal when
// their bytes are (a NaN equals itself, and 0 and -0 differ).
func rawBytes[T ddp.Float](s []T) []byte {
	var e T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(e)))
}

// replay runs one update of opt at learning rate lr.
func replay[T ddp.Float](opt optim.Optimizer[T], lr float64, params, grad []T) error {
	if err := opt.SetLR(lr); err != nil {
		return err
	}
	return opt.Step(params, grad)
}

// Buddied reports whether this rank holds a buddy copy (WrapWithBuddy).
func (z *ZeRO1[T]) Buddied() bool { return z.buddy != nil }

// BuddyState is the copy this rank holds of its left's shard state (rank
// r-d mod N for the buddy offset d), and that rank: what rebuilds the left's shard
// when it is lost. It is an error without buddies.
func (z *ZeRO1[T]) BuddyState() (left int, st optim.State, err error) {
	if z.buddy == nil {
		return 0, optim.State{}, fmt.Errorf("zero: no buddy copy: the wrapper was made without buddies (WrapWithBuddy)")
	}
	return z.buddy.left, z.buddy.shadow.State(), nil
}
