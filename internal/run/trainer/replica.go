package trainer

import (
	"context"
	"fmt"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// replica is one rank's data-parallel model as the training loop uses it,
// whichever way the optimizer state is held: ddpReplica (DDP, the full
// state on every rank) or *zero.ZeRO1 (ZeRO-1, a shard per rank).
type replica[T Float] interface {
	// Tapped are the nodes the forward pass uses in place of the
	// parameters; Backward adds the hooked backward pass of the loss.
	Tapped() G.Nodes
	Backward(loss *G.Node) error
	// Run runs forward and backward, the gradient buckets communicated
	// while the backward pass runs.
	Run(ctx context.Context, vm ddp.Machine) error
	// Step updates the parameters from the gradients (ZeRO-1: this rank's
	// shard, then the all-gather of the parameters).
	Step(ctx context.Context) error
	// LastOptimizerTime is the last Step's time in the optimizer alone;
	// the rest of Step is communication.
	LastOptimizerTime() time.Duration
	// GatherOptimizerState returns the optimizer state over the whole
	// arena on rank root and the zero State elsewhere. Every rank calls
	// it.
	GatherOptimizerState(ctx context.Context, root int) (optim.State, error)
	// LoadFullOptimizerState loads a state over the whole arena (ZeRO-1:
	// this rank's shard of it).
	LoadFullOptimizerState(st optim.State) error
	// StateBytes is the optimizer state this rank holds.
	StateBytes() int64
	// DDP is the wrapper underneath: the arenas and their layout, the
	// step statistics and the agreement on loss and stopping.
	DDP() *ddp.DDP[T]
}

var (
	_ replica[float32] = ddpReplica[float32]{}
	_ replica[float32] = (*zero.ZeRO1[float32])(nil)
)

// newReplica wraps params over g: ZeRO-1 when cfg.Zero1 (with buddies
// when cfg.ZeroBuddies and there is a neighbour), else DDP with opt. Both agree on the loss and on stopping with the last gradient
// bucket (ddp.WithAgreement), stop being this rank's vote, with the
// straggler stamps (ddp.WithArrivalStamps) on rank 0's clock; env.rec,
// if set, records the buckets, and env.spans their collectives' spans.
func newReplica[T Float](ctx context.Context, cfg Config, g *allreduce.Group, params G.Nodes, opt optim.Optimizer[T], stop func() bool, env rankEnv) (replica[T], error) {
	first, rest := cfg.bucketBytes()
	opts := []ddp.Option{ddp.WithBucketBytes(first, rest), ddp.WithAgreement(stop), ddp.WithArrivalStamps(stampClock(env.offset))}
	opts = append(opts, ddp.WithObserver(bucketObserver{rec: env.rec, spans: env.spans}))
	if cfg.OverlapOptimizer {
		r, ok := opt.(optim.Ranged[T])
		if !ok {
			return nil, fmt.Errorf("trainer: optimizer %s cannot be applied bucket by bucket (overlap-optimizer)", opt.Name())
		}
		opts = append(opts, ddp.WithOptimizerInBackward[T](r))
	}
	if cfg.FindUnusedParameters {
		opts = append(opts, ddp.WithFindUnusedParameters())
	}
	if cfg.Zero1 && cfg.ZeroBuddies && g.Size() >= 2 {
		shadow, err := newOptimizer[T](cfg)
		if err != nil {
			return nil, err
		}
		d, err := buddyOffset(ctx, cfg, g)
		if err != nil {
			return nil, err
		}
		return zero.WrapWithBuddyAt[T](ctx, g, params, opt, shadow, d, opts...)
	}
	if cfg.Zero1 {
		return zero.Wrap[T](ctx, g, params, opt, opts...)
	}
	hook, err := newCompressHook[T](cfg, g)
	if err != nil {
		return nil, err
	}
	if hook != nil {
		opts = append(opts, ddp.WithCommHook(hook))
	}
	d, err := ddp.Wrap[T](ctx, g, params, opts...)
	if err != nil {
		return nil, err
	}
	return ddpReplica[T]{d: d, opt: opt}, nil
}

// ddpReplica is DDP with the optimizer it steps: every rank holds the whole
// optimizer state, identical on every rank.
type ddpReplica[T Float] struct {
	d   *ddp.DDP[T]
	opt optim.Optimizer[T]
}

func (r ddpReplica[T]) Tapped() G.Nodes                               { return r.d.Tapped() }
func (r ddpReplica[T]) Backward(loss *G.Node) error                   { return r.d.Backward(loss) }
func (r ddpReplica[T]) Run(ctx context.Context, vm ddp.Machine) error { return r.d.Run(ctx, vm) }
func (r ddpReplica[T]) Step(ctx context.Context) error                { return r.d.Step(ctx, r.opt) }
func (r ddpReplica[T]) LastOptimizerTime() time.Duration              { return r.d.LastStats().Optimizer }
func (r ddpReplica[T]) LoadFullOptimizerState(st optim.State) error   { return r.opt.LoadState(st) }
func (r ddpReplica[T]) StateBytes() int64                             { return r.opt.StateBytes() }
func (r ddpReplica[T]) DDP() *ddp.DDP[T]                              { return r.d }

// GatherOptimizerState needs no communication: every rank holds the same
// whole state.
func (r ddpReplica[T]) GatherOptimizerState(_ context.Context, root int) (optim.State, error) {
	if r.d.Group().Rank() != root {
		return optim.State{}, nil
	}
	return r.opt.State(), nil
}
