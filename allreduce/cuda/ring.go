package cuda

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// enqueue puts this rank's plan of call x on its stream.
func (c *Comm) enqueue(ctx context.Context, x collective, ptrs [numBufs]uintptr, dstInSrc bool) error {
	w := c.w
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if x.count < 0 {
		return fmt.Errorf("%w: %v", allreduce.ErrInvalid, x)
	}
	p, err := makePlan(x, w.n, c.rank, dstInSrc, w.segBytes)
	if err != nil {
		return err
	}
	if p.scratch > 0 {
		if err := c.ensureScratch(ctx, 2*p.scratch); err != nil {
			return err
		}
		ptrs[bufScratch0] = c.scratch.Uintptr()
		ptrs[bufScratch1] = c.scratch.Uintptr() + uintptr(p.scratch)
	}
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	seq := c.seq
	c.seq++
	w.mu.Lock()
	w.posted[c.rank][seq%4] = postedCall{seq: seq, call: x, ptrs: ptrs}
	w.mu.Unlock()
	if err := c.run(ctx, p, seq, ptrs); err != nil {
		return w.fail(err)
	}
	return nil
}

// run enqueues p: entry actions, the entry event, every segment of every
// step after its waits, and the tail.
func (c *Comm) run(ctx context.Context, p *plan, seq uint64, mine [numBufs]uintptr) error {
	w := c.w
	for _, x := range p.entry {
		if err := c.do(p, x, mine, mine); err != nil {
			return err
		}
	}
	if w.n == 1 {
		return nil
	}
	n := w.n
	left, right := mod(c.rank-1, n), mod(c.rank+1, n)
	base := c.recs
	if err := c.record(ctx, base, p.segs, left, right); err != nil {
		return err
	}
	// The neighbours' calls and buffers, once they have posted them
	// (before their entry event).
	var theirs [numBufs]uintptr
	for _, nb := range []int{left, right} {
		if err := w.waitFor(ctx, nb, base+1); err != nil {
			return err
		}
		w.mu.Lock()
		pc := w.posted[nb][seq%4]
		w.mu.Unlock()
		if pc.seq != seq || pc.call != p.call() {
			return fmt.Errorf("cuda: mismatched collectives: rank %d called %v, rank %d called %v (call %d)", c.rank, p.call(), nb, pc.call, seq)
		}
		if nb == left {
			theirs = pc.ptrs
		}
	}
	for g := range p.steps {
		for k := 0; k < p.segs; k++ {
			wi := base + int64(p.waitIndex(g, k))
			for _, nb := range neighbours(left, right) {
				if err := w.waitFor(ctx, nb, wi+1); err != nil {
					return err
				}
				if err := c.stream.wait(w.comms[nb].events[wi%eventRing]); err != nil {
					return fmt.Errorf("cuda: cuStreamWaitEvent: %w", err)
				}
			}
			if x := p.steps[g][k]; x.out.n > 0 {
				if err := c.do(p, x, mine, theirs); err != nil {
					return err
				}
			}
			if err := c.record(ctx, base+int64(p.recordIndex(g, k)), p.segs, left, right); err != nil {
				return err
			}
		}
	}
	// The tail: the right neighbour has read this rank's buffers.
	last := base + int64(p.records()) - 1
	if err := w.waitFor(ctx, right, last+1); err != nil {
		return err
	}
	if err := c.stream.wait(w.comms[right].events[last%eventRing]); err != nil {
		return fmt.Errorf("cuda: cuStreamWaitEvent: %w", err)
	}
	return nil
}

func neighbours(left, right int) []int {
	if left == right {
		return []int{left}
	}
	return []int{left, right}
}

// record records event t on the stream, once the neighbours can no longer
// wait for the event that used its slot before, and publishes it.
func (c *Comm) record(ctx context.Context, t int64, segs, left, right int) error {
	w := c.w
	if need := t - eventRing + int64(segs) + 1; need > 0 {
		for _, nb := range neighbours(left, right) {
			if err := w.waitFor(ctx, nb, need); err != nil {
				return err
			}
		}
	}
	if err := c.events[t%eventRing].record(c.stream); err != nil {
		return fmt.Errorf("cuda: cuEventRecord: %w", err)
	}
	c.recs = t + 1
	w.mu.Lock()
	w.progress[c.rank] = t + 1
	w.cond.Broadcast()
	w.mu.Unlock()
	return nil
}

// do enqueues one action: mine are this rank's buffers, left the left
// neighbour's.
func (c *Comm) do(p *plan, x action, mine, left [numBufs]uintptr) error {
	addr := func(b [numBufs]uintptr, s span) uintptr { return b[s.buf] + uintptr(s.off) }
	switch x.kind {
	case actLocalCopy:
		return c.copy(addr(mine, x.out), addr(mine, x.a), x.out.n)
	case actCopy:
		return c.copy(addr(mine, x.out), addr(left, x.b), x.out.n)
	}
	name, err := stepKernel(p.op, p.dt, x.last)
	if err != nil {
		return err
	}
	if err := c.w.dev.b.launchReduce(c.stream, name, addr(mine, x.out), addr(mine, x.a), addr(left, x.b), x.out.n/p.dt.Size(), c.w.n); err != nil {
		return fmt.Errorf("cuda: rank %d: launching %s: %w", c.rank, name, err)
	}
	return nil
}

func (c *Comm) copy(dst, src uintptr, n int) error {
	if n == 0 || dst == src {
		return nil
	}
	if err := c.w.dev.b.copyAsync(c.stream, dst, src, n); err != nil {
		return fmt.Errorf("cuda: rank %d: device-to-device copy of %d bytes: %w", c.rank, n, err)
	}
	return nil
}

// ensureScratch makes the scratch buffer at least n bytes. Growing it
// waits for the stream first: the previous collective's tail guarantees
// no neighbour reads the old one after that.
func (c *Comm) ensureScratch(ctx context.Context, n int) error {
	if c.scratch != nil && c.scratch.Bytes() >= n {
		return nil
	}
	if c.scratch != nil {
		if err := c.Synchronize(ctx); err != nil {
			return err
		}
		if err := c.scratch.Free(); err != nil {
			return err
		}
		c.scratch = nil
	}
	b, err := c.w.dev.Alloc(n)
	if err != nil {
		return err
	}
	c.scratch = b
	return nil
}
