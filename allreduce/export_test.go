package allreduce

import "context"

// Test hooks into the package's internals, for the external tests.

// Tuning is the test view of a Group's segment sizes and thresholds
// (tuning); zero fields keep the defaults.
type Tuning struct {
	TreeSegment  int // bytes per segment of Tree
	ChainSegment int // bytes per segment of the Broadcast and Reduce chains
	ChainMin     int // smallest Broadcast or Reduce sent by chain
}

// WithTuning shrinks segments and thresholds so that the multi-segment
// and large-message paths run on small inputs, as gloo's tests shrink its
// segment size.
func WithTuning(t Tuning) GroupOption {
	return func(g *Group) {
		g.tune = tuning{treeSegment: t.TreeSegment, chainSegment: t.ChainSegment, chainMin: t.ChainMin}
	}
}

// DTreeNode is rank r's parent and children (-1: none) in tree t of the
// double binary tree of n ranks, and its level.
func DTreeNode(n, r, t int) (parent int, child [2]int, level int) {
	nd := dtreeNode(n, r, t)
	return nd.parent, nd.child, nd.level
}

// HDReduceScatter runs the stand-alone halving reduce-scatter
// (hdReduceScatter) as call number seq, outside the group's sequencing:
// the test must not run anything else on g at the same time.
func HDReduceScatter[T Numeric](ctx context.Context, g *Group, seq uint64, dst, src []T, op ReduceOp) error {
	c := call{kind: KindReduceScatter, dt: DTypeOf[T](), op: op, root: -1, count: len(src), buf: asBytes(dst), src: asBytes(src)}
	if err := c.validate(g.size); err != nil {
		return err
	}
	return g.hdReduceScatter(ctx, c.header(g.id, seq), &c)
}

// HDAllGather runs the stand-alone doubling all-gather (hdAllGather) as
// call number seq, like HDReduceScatter.
func HDAllGather[T Numeric](ctx context.Context, g *Group, seq uint64, dst, src []T) error {
	c := call{kind: KindAllGather, dt: DTypeOf[T](), root: -1, count: len(dst), buf: asBytes(dst), src: asBytes(src)}
	if err := c.validate(g.size); err != nil {
		return err
	}
	return g.hdAllGather(ctx, c.header(g.id, seq), &c)
}
