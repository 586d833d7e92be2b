package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Step primitives. Every algorithm is a script of these, in the manner of
// NCCL's directSend / directRecvReduceSend: each names what one rank does
// in one step of a collective, with the message's step number (its index
// within the collective, per sender, carried in the header so that a
// message of another step is a mismatch, never a wrong payload).
//
//	send            to ← p
//	recvCopy        dst ← from
//	recvReduce      out ← local op (from)           or (from) op local
//	sendRecvCopy    to ← p, at once dst ← from
//	sendRecvReduce  to ← p, at once out ← local op (from), or the reverse
//
// A message larger than the cost model's Segment goes in pieces, whichever
// primitive sends or receives it (pieces.go).
//
// The operand order of a reduction is explicit (localFirst or
// receivedFirst) because a op b and b op a can differ in floating point
// (the sign of a zero Max, a NaN's payload): an algorithm that lets two
// ranks compute one value must give both the same order.

// operandOrder says which operand of a reduction comes first.
type operandOrder bool

const (
	localFirst    operandOrder = false // out = local op received
	receivedFirst operandOrder = true  // out = received op local
)

// at is h with its step number set.
func at(h transport.Header, step uint32) transport.Header {
	h.Step = step
	return h
}

// send sends p to rank to as message step of the call h, in pieces when
// it is larger than the model's segment (pieces.go).
func (g *Group) send(ctx context.Context, h transport.Header, step uint32, to int, p []byte) error {
	h = at(h, step)
	es := elemSize(h)
	k := g.piecesOf(len(p), es)
	for j := range k {
		lo, hi := pieceBounds(len(p), es, k, j)
		if err := g.conn.Send(ctx, to, h, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// recvCopy receives message step from rank from into dst (len(dst) bytes).
func (g *Group) recvCopy(ctx context.Context, h transport.Header, step uint32, from int, dst []byte) error {
	return g.recvPieces(ctx, at(h, step), from, len(dst), func(lo, hi int) transport.Sink {
		g.copy.dst = dst[lo:hi]
		return &g.copy
	})
}

// recvReduce receives message step from rank from (len(local) bytes) and
// reduces it with local into out, in the given operand order. out may be
// local.
func (g *Group) recvReduce(ctx context.Context, h transport.Header, step uint32, from int, local, out []byte, order operandOrder) error {
	return g.recvPieces(ctx, at(h, step), from, len(local), func(lo, hi int) transport.Sink {
		return g.combiner(h, local[lo:hi], out[lo:hi], order)
	})
}

// sendRecvCopy sends p to rank to while receiving message step from rank
// from into dst: one step of a ring's all-gather. Either message may go
// in pieces (exchangePieces).
func (g *Group) sendRecvCopy(ctx context.Context, h transport.Header, step uint32, to int, p []byte, from int, dst []byte) error {
	return g.exchangePieces(ctx, at(h, step), to, p, from, len(dst), func(sp []byte, send bool, lo, hi int) error {
		sink := &g.copy
		sink.dst = dst[lo:hi]
		err := g.exchangePiece(ctx, at(h, step), to, sp, send, from, hi-lo, sink)
		sink.dst = nil
		return err
	})
}

// sendRecvReduce sends p to rank to while receiving message step from
// rank from (len(local) bytes) and reducing it with local into out: one
// step of a ring's reduce-scatter or a doubling exchange. out may be local.
// Either message may go in pieces (exchangePieces).
func (g *Group) sendRecvReduce(ctx context.Context, h transport.Header, step uint32, to int, p []byte, from int, local, out []byte, order operandOrder) error {
	return g.exchangePieces(ctx, at(h, step), to, p, from, len(local), func(sp []byte, send bool, lo, hi int) error {
		sink := g.combiner(h, local[lo:hi], out[lo:hi], order)
		err := g.exchangePiece(ctx, at(h, step), to, sp, send, from, hi-lo, sink)
		sink.out, sink.local = nil, nil
		return err
	})
}

// combiner readies the group's combine sink for one receive of call h.
func (g *Group) combiner(h transport.Header, local, out []byte, order operandOrder) *combineSink {
	sink := &g.combine
	sink.dt, sink.op = DType(h.DType), ReduceOp(h.Op)
	sink.local, sink.out, sink.receivedFirst = local, out, order == receivedFirst
	return sink
}

// exchange sends sp to rank to while receiving n bytes from rank from into
// sink: one step of a ring.
func (g *Group) exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if g.exchanger != nil {
		return g.exchanger.Exchange(ctx, to, sh, sp, from, rh, n, sink)
	}
	sent := make(chan error, 1)
	go func() { sent <- g.conn.Send(ctx, to, sh, sp) }()
	rerr := g.conn.Recv(ctx, from, rh, n, sink)
	if rerr != nil {
		if a, ok := g.conn.(transport.Aborter); ok {
			a.Abort(rerr)
		}
	}
	serr := <-sent
	if rerr != nil {
		return rerr
	}
	return serr
}
