package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// agreeStep is the step number of the agreement message.
const agreeStep = ^uint32(0)

// agree is the agreement step: the call's header, in a 0-byte message, to
// the right ring neighbour while one comes from the left. It runs before
// collectives whose own messages might not cross between mismatched ranks
// — the trees (ranks with different roots may only send, or only receive)
// and calls with no elements — so a mismatch is found (with a neighbour;
// the abort that follows reaches every other rank) instead of a hang.
func (g *Group) agree(ctx context.Context, h transport.Header) error {
	if g.size == 1 {
		return nil
	}
	return g.sendRecvCopy(ctx, h, agreeStep, mod(g.rank+1, g.size), nil, mod(g.rank-1, g.size), nil)
}
