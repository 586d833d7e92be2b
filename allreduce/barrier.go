package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// disseminationBarrier: in round k every rank signals rank r+2^k and waits
// for rank r-2^k (0-byte messages); after ⌈log2 N⌉ rounds every rank has
// heard, directly or not, from every other, so none leaves before all have
// arrived.
func (g *Group) disseminationBarrier(ctx context.Context, h transport.Header) error {
	n, r := g.size, g.rank
	for k, dist := 0, 1; dist < n; k, dist = k+1, dist*2 {
		if err := g.sendRecvCopy(ctx, h, uint32(k), mod(r+dist, n), nil, mod(r-dist, n), nil); err != nil {
			return err
		}
	}
	return nil
}
