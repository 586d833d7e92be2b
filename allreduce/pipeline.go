package allreduce

import (
	"context"
	"errors"
	"slices"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Pipelining the topology-aware compositions (hierarchical.go, torus.go).
// Each is three stages over the buffer: "in", within the node (a Reduce
// or ReduceScatter), "across", between nodes (the inter-node
// all-reduces), and "out", within the node again (a Broadcast or
// AllGather). Run one after the other, the inter-node link idles while
// the node's ranks reduce and copy, and the node's memory idles while the
// link carries the buffer. Pipelined, the buffer is cut into B blocks
// (ChunkBounds(count, B, b)), each block goes through the three stages
// in order, and block b crosses between nodes while block b+1 goes in and
// block b-1 comes out: the time is about the slowest stage's plus a
// B-th of the others', instead of their sum.
//
// Two goroutines of the rank run the stages: the caller's runs the
// intra-node calls, in the order in(0), in(1), out(0), in(2), out(1), ...,
// in(B-1), out(B-2), out(B-1) (the same on every rank of the node, as a
// sub-group's calls must be); a second one runs across(0), across(1), ...
// in order. across(b) starts once in(b) is done on this rank, and out(b)
// once across(b) is. The two goroutines use disjoint sets of peers — the
// ranks of this node, and ranks of other nodes — so they run at once only
// where the transport carries those over separate endpoints and says so
// (localEndpoint: package mixed, shared memory within hosts and tcp
// between); elsewhere (and on a rank alone on its node) the blocks run one
// after the other, each stage after the other, on the caller's goroutine.
// How many blocks (pipelineBlocks) depends on the buffer's size only, so
// every rank cuts it alike whatever its transport (the simulator's
// virtual buffers included). On a simulated transport whose ranks keep a
// clock per endpoint (endpointClocks: package sim with Config.Overlap)
// each goroutine hands its endpoint's time to the other where the other
// waits for it, so the simulated time follows this schedule.
// No cycle of waits: across(b) on a node needs in(b) on every node,
// which comes after out(b-2) there, which needs across(b-2) only.
//
// Results do not depend on B's schedule: each element is reduced by the
// same stages, in the same order, whichever block it falls in; blocks
// change only which sub-group calls carry it (and so, through the size
// of those calls, which algorithm Auto runs them with, the same on every
// member).

// localEndpoint is the optional capability of a transport that carries
// its messages to some ranks through an endpoint of their own, separate
// from the one that carries those to every other rank, each used by one
// call at a time: LocalEndpointMembers lists the former, in the root
// group's numbering (nil: one endpoint for all). Where they are exactly
// this rank's node, one call among the node's ranks and one among other
// nodes' may run at once, from two goroutines (package mixed: shared
// memory within the host, tcp between hosts).
type localEndpoint interface {
	LocalEndpointMembers() []int
}

// Pipelining's block sizes: a block carries at least minPipelineBlock
// bytes (smaller ones spend more on each sub-group call's steps than the
// overlap saves), and a buffer is cut into at most maxPipelineBlocks.
const (
	minPipelineBlock  = 4 << 20
	maxPipelineBlocks = 8
)

// endpointClocks is the optional capability of a transport whose time
// is virtual and kept per endpoint while a rank overlaps its two
// (package sim with Config.Overlap): SplitClock and JoinClock bracket
// the overlap, and PostClock(local) hands the time of the local endpoint
// (or of the other) to the other endpoint's next AwaitClock, which
// waits for it as a blocked receive does.
type endpointClocks interface {
	SplitClock()
	JoinClock()
	PostClock(local bool)
	AwaitClock(ctx context.Context, local bool) error
}

// pipelineBlocks is how many blocks a composition cuts bytes into, the
// same on every rank (it depends on nothing else): 1 on one node, where
// there is nothing to overlap.
func (g *Group) pipelineBlocks(hy *hierarchy, bytes int) int {
	if hy.nodes() == 1 {
		return 1
	}
	return max(1, min(maxPipelineBlocks, bytes/minPipelineBlock))
}

// overlaps reports whether this rank runs a composition's blocks on two
// goroutines: where it shares its node and the transport carries its
// node's messages and the others' apart (nodeEndpointsApart).
func (g *Group) overlaps(hy *hierarchy) bool {
	return hy.intra != nil && hy.nodes() > 1 && g.nodeEndpointsApart(hy)
}

// nodeEndpointsApart reports whether the transport's local endpoint
// (localEndpoint) carries exactly the messages to this rank's node.
func (g *Group) nodeEndpointsApart(hy *hierarchy) bool {
	le, ok := g.rootConn().(localEndpoint)
	if !ok {
		return false
	}
	local := le.LocalEndpointMembers()
	node := hy.members[hy.node]
	if len(local) != len(node) {
		return false
	}
	for _, r := range node {
		if !slices.Contains(local, g.worldOf(r)) {
			return false
		}
	}
	return true
}

// stages are a composition's three stages of block b.
type stages struct {
	in, across, out func(ctx context.Context, b int) error
}

// handoff is one direction of the signals between runBlocks's two
// goroutines: per block, a channel closed when its stage is done there
// and, on a transport that keeps a clock per endpoint, that endpoint's
// time handed to the other's.
type handoff struct {
	done  []chan struct{}
	clock endpointClocks // nil: a real transport
	local bool           // the signalling goroutine runs the intra-node stages
}

func newHandoff(blocks int, clock endpointClocks, local bool) handoff {
	h := handoff{done: make([]chan struct{}, blocks), clock: clock, local: local}
	for b := range h.done {
		h.done[b] = make(chan struct{})
	}
	return h
}

// signal says block b's stage is done.
func (h handoff) signal(b int) {
	if h.clock != nil {
		h.clock.PostClock(h.local)
	}
	close(h.done[b])
}

// wait waits, on the other goroutine, until block b's stage is done.
func (h handoff) wait(ctx context.Context, b int) error {
	if h.clock != nil {
		if err := h.clock.AwaitClock(ctx, !h.local); err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // cut short by the other goroutine's failure
			}
			return err
		}
	}
	select {
	case <-h.done[b]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runBlocks runs st over blocks blocks: pipelined on two goroutines
// where this rank overlaps them, else in(b), across(b), out(b) for each
// block in turn.
func (g *Group) runBlocks(ctx context.Context, hy *hierarchy, blocks int, st stages) error {
	if blocks <= 1 || !g.overlaps(hy) {
		for b := range blocks {
			for _, f := range []func(context.Context, int) error{st.in, st.across, st.out} {
				if err := f(ctx, b); err != nil {
					return err
				}
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clock, _ := g.rootConn().(endpointClocks)
	if clock != nil {
		clock.SplitClock()
		defer clock.JoinClock() // after both goroutines are done: see below
	}
	// inDone has a last signal, the intra-node goroutine's end, which the
	// across goroutine waits for before it ends: on a simulated transport
	// an endpoint that makes no more calls must wait where the simulator
	// sees it (endpointClocks), or the other ranks of its shared NIC would
	// wait for its clock to move.
	inDone, acrossDone := newHandoff(blocks+1, clock, true), newHandoff(blocks, clock, false)
	acrossErr := make(chan error, 1)
	// fail ends the other goroutine's pending call: a failed
	// composition fails the whole family anyway (Group).
	fail := func(err error) {
		cancel()
		if a, ok := g.conn.(transport.Aborter); ok {
			a.Abort(err)
		}
	}
	go func() {
		acrossErr <- func() error {
			for b := range blocks {
				if err := inDone.wait(ctx, b); err != nil {
					if ctx.Err() == nil {
						fail(err) // the simulator's wait failed (endpointClocks)
					}
					return err
				}
				if err := st.across(ctx, b); err != nil {
					fail(err)
					return err
				}
				acrossDone.signal(b)
			}
			return inDone.wait(ctx, blocks)
		}()
	}()
	err := g.intraBlocks(ctx, blocks, st, inDone, acrossDone)
	if err != nil {
		fail(err)
	}
	aerr := <-acrossErr
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		return err
	case aerr != nil:
		return aerr
	}
	return err
}

// intraBlocks is runBlocks's intra-node goroutine: in(0), then in(b+1)
// and out(b) for each block, then the signal that it is done.
func (g *Group) intraBlocks(ctx context.Context, blocks int, st stages, inDone, acrossDone handoff) error {
	if err := st.in(ctx, 0); err != nil {
		return err
	}
	inDone.signal(0)
	for b := range blocks {
		if b+1 < blocks {
			if err := st.in(ctx, b+1); err != nil {
				return err
			}
			inDone.signal(b + 1)
		}
		if err := acrossDone.wait(ctx, b); err != nil {
			return err
		}
		if err := st.out(ctx, b); err != nil {
			return err
		}
	}
	inDone.signal(blocks)
	return nil
}
