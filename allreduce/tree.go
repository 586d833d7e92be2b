package allreduce

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Binomial trees over virtual ranks v = (r - root) mod N, so the root is
// v = 0. In round k (mask = 2^k) the ranks with v < mask that have a partner
// v + mask < N talk to it.
//
// Broadcast: the data flows down the tree, ⌈log2 N⌉ rounds; the root sends
// up to ⌈log2 N⌉·M bytes, every other rank receives M once.
//
// Reduce: the data flows up the tree, each non-root rank sends its partial
// result (M bytes) to its parent once; children are combined in a fixed
// order, so the root's result is the same run to run. Non-root buffers are
// left unchanged (partial results live in scratch).

func (g *Group) treeBroadcast(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agree(ctx, h); err != nil || n == 1 || c.count == 0 {
		return err
	}
	v := mod(g.rank-c.root, n)
	mask := 1
	for mask < n {
		if v&mask != 0 {
			g.copy.dst = c.buf
			err := g.conn.Recv(ctx, mod(v-mask+c.root, n), h, len(c.buf), &g.copy)
			g.copy.dst = nil
			if err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			if err := g.conn.Send(ctx, mod(v+mask+c.root, n), h, c.buf); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *Group) treeReduce(ctx context.Context, h transport.Header, c *call) error {
	if err := g.checkLen("buffer", len(c.buf), c.count*c.dt.Size()); err != nil {
		return err
	}
	n := g.size
	if err := g.agree(ctx, h); err != nil || n == 1 || c.count == 0 {
		return err
	}
	v := mod(g.rank-c.root, n)
	acc := c.buf // the partial result so far
	sink := &g.combine
	sink.dt, sink.op = c.dt, c.op
	defer func() { sink.out, sink.local = nil, nil }()
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			return g.conn.Send(ctx, mod(v-mask+c.root, n), h, acc)
		}
		child := v | mask
		if child >= n {
			continue
		}
		sink.local, sink.out = acc, acc
		if v != 0 && &acc[0] == &c.buf[0] {
			sink.out = g.scratchBytes(len(c.buf))
		}
		if err := g.conn.Recv(ctx, mod(child+c.root, n), h, len(c.buf), sink); err != nil {
			return err
		}
		acc = sink.out
	}
	if c.op == Avg {
		divideBytes(c.dt, c.buf, n)
	}
	return nil
}

// disseminationBarrier: in round k every rank signals rank r+2^k and waits
// for rank r-2^k; after ⌈log2 N⌉ rounds every rank has heard, directly or
// not, from every other, so none leaves before all have arrived.
func (g *Group) disseminationBarrier(ctx context.Context, h transport.Header) error {
	n, r := g.size, g.rank
	for k, dist := 0, 1; dist < n; k, dist = k+1, dist*2 {
		h.Step = uint32(k)
		if err := g.exchange(ctx, mod(r+dist, n), h, nil, mod(r-dist, n), h, 0, &g.copy); err != nil {
			return err
		}
	}
	return nil
}

// agreeStep is the step number of the agreement message.
const agreeStep = ^uint32(0)

// agree exchanges the call's header with the ring neighbours (0 bytes), for
// collectives whose own messages might not cross between mismatched ranks:
// the trees (ranks with different roots may only send, or only receive)
// and calls with no elements. A mismatch with a neighbour is reported here;
// the abort that follows reaches every other rank.
func (g *Group) agree(ctx context.Context, h transport.Header) error {
	if g.size == 1 {
		return nil
	}
	h.Step = agreeStep
	return g.exchange(ctx, mod(g.rank+1, g.size), h, nil, mod(g.rank-1, g.size), h, 0, &g.copy)
}

func errLen(what string, got, want int) error {
	return fmt.Errorf("%w: %s is %d bytes, want %d", ErrInvalid, what, got, want)
}
