package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// agreeStep is the step number of the agreement message; agreeChainStep
// that of a Broadcast or Reduce that goes by chain, so that ranks on the
// binomial tree and ranks on the chain (given different schedules or
// models) disagree at the agreement, as a mismatch that names both
// (describeHeader), instead of sending each other what the others do not
// expect.
const (
	agreeStep      = ^uint32(0)
	agreeChainStep = agreeStep - 1
)

// agree is the agreement step: the call's header, in a 0-byte message, to
// the right ring neighbour while one comes from the left. It runs before
// collectives whose own messages might not cross between mismatched ranks
// — the trees (ranks with different roots may only send, or only receive)
// and calls with no elements — so a mismatch is found (with a neighbour;
// the abort that follows reaches every other rank) instead of a hang.
func (g *Group) agree(ctx context.Context, h transport.Header) error {
	return g.agreeAt(ctx, h, agreeStep)
}

// agreeAt is the agreement step with the given step number.
func (g *Group) agreeAt(ctx context.Context, h transport.Header, step uint32) error {
	if g.size == 1 {
		return nil
	}
	return g.sendRecvCopy(ctx, h, step, mod(g.rank+1, g.size), nil, mod(g.rank-1, g.size), nil)
}
